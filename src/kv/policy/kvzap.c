/* KVzap (Jegou and Jeblick, NVIDIA 2026, arXiv:2601.07891; kvpress's
 * KVzapPress): KVzip's scores without KVzip's second pass. A linear map per
 * layer, fitted by `kvfold calibrate` to KVzip+'s log scores (the most
 * attention any query of the context's repetition paid an entry, each
 * query's row divided by the norm of its attention input and each entry's
 * weight multiplied by the norm of what its value adds to the output, max
 * over the query heads of its kv head), scores an entry from its layer's
 * attention input as the entry is written (kv/kvzap.h; model/decoder.c), in
 * the prompt and while decoding; compression ranks by those scores, and so
 * does +decode=recompress (the other decode stages keep their own rules).
 * The first `sinks` entries are always kept. Each kv head keeps its share,
 * as kvpress's KVzapPress under a compression ratio does: ranking every
 * layer together (+budget=global, kvzip's) answered less on RULER, a
 * linear scorer's errors differing by layer; a threshold on the score
 * (+budget=threshold:tau=T, kvpress's DMSPress) answered the most, the
 * share kept following the context. */
#include "kv/policy.h"

#include "kv/kvzap.h"

#include <math.h>

static void kv_score_kvzap(const struct kv_score_in *in, float *score) {
    for (int j = 0; j < in->h->n; j++) {
        const float x = in->h->prior[j];
        score[j] = j < in->p->sinks ? INFINITY : isfinite(x) ? x : -INFINITY;
    }
}

const struct kv_rule kv_rule_kvzap = {
    .stage = "preset",
    .name = "kvzap",
    .summary = "KVzip's scores predicted from each layer's input as entries are written (a scorer fitted by kvfold "
               "calibrate; no second pass)",
    .paper = "KVzap (Jegou and Jeblick, NVIDIA 2026, arXiv:2601.07891); kvpress's KVzapPress",
    .keys = "budget sinks scorer",
    .shown = "budget=0.2,sinks=4",
    .defaults = {.method = KV_KVZAP, .budget = 0.2, KV_STAGE_DEFAULTS},
    .stat = &kv_stat_zap,
    .score = kv_score_kvzap,
};
