/* Answer metrics of kvfold eval (docs/METHODS.md §7). */
#ifndef KVF_METRICS_H
#define KVF_METRICS_H

#include <stdbool.h>
#include <stddef.h>

/* ROUGE-L F1 (beta = 1) of candidate against reference over word tokens,
 * tokenised as Google's rouge_score package does without stemming:
 * lowercase, every character outside [a-z0-9] a separator. 0 when either
 * side has no token. */
double metrics_rouge_l_f1(const char *candidate, const char *reference);
/* Whether output contains answer, ignoring ASCII case (the needle test). */
bool metrics_contains(const char *output, const char *answer);
/* RULER's string_match_all: the share of the expected strings (answers, a
 * line each) that output contains, ignoring ASCII case; 0 without any. */
double metrics_match_all(const char *output, const char *answers);

/* MileBench's own scoring (its evaluate.py), rule for rule, quirks
 * included, so that its numbers can be compared with the paper's. Python's
 * str methods are followed for ASCII; other characters are left as they are
 * (no Unicode case folding or Unicode whitespace). */
enum metrics_mb_rule {
    MB_RULE_NEEDLE,   /* *NeedleInAHaystack: the answer is one of the output's words */
    MB_RULE_CONTAINS, /* MMCoQA: the answer is inside the output                       */
    MB_RULE_ROUGE,    /* open-ended: ROUGE-L F of the `rouge` 1.0.1 package             */
    MB_RULE_CHOICE,   /* multi-choice: the option letter matched in the output          */
};
/* Eval.process: newlines and tabs to spaces, punctuation removed (or turned
 * into spaces unless it touches a space, or the text has a digit,digit),
 * up to 32 periods not followed by a digit removed, quotes stripped,
 * lowercased. Returns a new string (NULL: out of memory). */
char *metrics_mb_normalise(const char *s);
/* The `rouge` package's rouge-l "f" of hyp against ref as MileBench calls
 * it: sentences split at '.', words at single spaces, the union of the
 * reconstructed LCS words of every (ref, hyp) sentence pair counted as a
 * set, over the distinct words of each side; F = 2PR / (P + R + 1e-8). 0
 * when a side has no sentence (the package raises). */
double metrics_mb_rouge_l(const char *hyp, const char *ref);
/* match_choice: the option letters (A, B, ...) that normalised text picks
 * among normalised choices[0..n) ('C' for an empty text, as MileBench
 * does; several letters or none when its last fallback is reached), in
 * out[cap]. */
void metrics_mb_choice(const char *text, const char *const *choices, int n, char *out, size_t cap);
/* The score of a prediction against the ground truth (both raw) under
 * rule: 0 or 1, or the ROUGE-L F. choices: multi-choice options (raw).
 * Returns -1 when MileBench itself would fail on the sample (an empty
 * ground truth for ROUGE, a ground truth that is none of the choices) or
 * on out of memory. */
double metrics_mb_score(enum metrics_mb_rule rule, const char *pred, const char *gt, const char *const *choices,
                        int n_choices);

#endif
