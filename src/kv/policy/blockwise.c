/* Block-wise prefill under a fixed budget ("Reducing Peak Memory Usage for
 * Modern Multimodal Large Language Model Pipelines", 2025): the prompt runs
 * in blocks — N tokens, or one image or video frame each — and after every
 * block each head is evicted back to M entries, so the cache never holds
 * more than M plus one block, however many images the prompt has. The
 * evictor scores what is cached so far: SnapKV's rule with the last queries
 * seen (or, with question=1, the prompt's question run alone first as the
 * proxy queries) or KeyDiff's, which needs no queries. The session runs the
 * blocks (src/session/session.c); this rule scores with the evictor, and
 * `+schedule=blocks` gives any other preset the same prefill. */
#include "kv/policy.h"

const struct kv_rule kv_rule_blockwise = {
    .stage = "preset",
    .name = "blockwise",
    .summary = "the prompt in blocks (block=N tokens, or block=image: one per image or frame), evicted back to budget "
               "M entries after each, so the cache never exceeds M + block; evict=snapkv (window of the last tokens "
               "seen, or with question=1 of the question run alone first) or keydiff",
    .paper = "Reducing Peak Memory Usage for Modern Multimodal Large Language Model Pipelines (Kim & Bae, Findings of "
             "ACL 2026, arXiv:2604.16734)",
    .keys = "budget block evict first window kernel question",
    .shown = "budget=1024,block=256,evict=snapkv,first=0,window=32,kernel=5,question=0",
    .defaults = {.method = KV_BLOCKWISE, .budget = 1024, .blocks = true, .block = 256, .evict = KV_SNAPKV, .window = 32,
                 .kernel = 5, KV_STAGE_DEFAULTS},
    .needs = KV_NEEDS_EVICTOR,
};

const struct kv_rule kv_rule_schedule_blocks = {
    .stage = "schedule",
    .name = "blocks",
    .summary = "as the blockwise preset: evicted back to budget M entries (snapkv or keydiff) after every block; the "
               "preset's own rule applies once the prompt is in",
    .paper = "Reducing Peak Memory Usage for Modern Multimodal Large Language Model Pipelines (Kim & Bae, Findings of "
             "ACL 2026, arXiv:2604.16734)",
    .keys = "budget block evict first window question",
    .shown = "budget=1024,block=256,evict=snapkv,first=0,window=32,question=0",
    .defaults = {.blocks = true, .budget = 1024, .block = 256, .evict = KV_SNAPKV, .window = 32},
};
