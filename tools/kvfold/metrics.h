/* Answer metrics of kvfold eval (DESIGN.md section 8). */
#ifndef KVF_METRICS_H
#define KVF_METRICS_H

#include <stdbool.h>

/* ROUGE-L F1 (beta = 1) of candidate against reference over word tokens,
 * tokenised as Google's rouge_score package does without stemming:
 * lowercase, every character outside [a-z0-9] a separator. 0 when either
 * side has no token. */
double metrics_rouge_l_f1(const char *candidate, const char *reference);
/* Whether output contains answer, ignoring ASCII case (the needle test). */
bool metrics_contains(const char *output, const char *answer);

#endif
