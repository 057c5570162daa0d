/* StreamingLLM (Xiao et al., 2023): the first `sinks` entries, which soak up
 * attention whatever the content, plus the most recent ones. */
#include "kv/policy.h"

#include <math.h>

void kv_score_streaming(const struct kv_score_in *in, float *score) {
    for (int j = 0; j < in->h->n; j++) score[j] = j < in->p->sinks ? INFINITY : (float)j;
}
