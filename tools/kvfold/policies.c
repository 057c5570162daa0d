/* kvfold policies: the KV cache policies --kv accepts. */
#include "cli.h"

#include <string.h>

static int policies_opts(struct args *a, struct opt *out) {
    const struct opt t[] = { OPT_JSON };
    OPTS_RETURN(out, t);
}

static cJSON *policy_json(const struct kvf_kv_policy_info *p) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "stage", p->stage);
    cJSON_AddStringToObject(o, "name", p->name);
    cJSON_AddStringToObject(o, "summary", p->summary);
    cJSON_AddStringToObject(o, "paper", p->paper);
    cJSON_AddStringToObject(o, "keys", p->keys);
    cJSON_AddStringToObject(o, "defaults", p->defaults);
    return o;
}

static int cmd_policies(const struct args *a) {
    cJSON *arr = a->json ? cJSON_CreateArray() : NULL;
    const char *stage = "";
    for (int i = 0; i < kvf_kv_policy_count(); i++) {
        struct kvf_kv_policy_info p;
        kvf_kv_policy_get(i, &p);
        if (a->json) {
            cJSON_AddItemToArray(arr, policy_json(&p));
            continue;
        }
        const bool preset = !strcmp(p.stage, "preset");
        if (strcmp(stage, p.stage))
            printf(preset ? "presets (--kv NAME[:key=value,...]):\n"
                          : "\n%s stage (append +%s=OPTION[:key=value,...]):\n", p.stage, p.stage);
        stage = p.stage;
        printf("  %-15s %s\n  %-15s defaults: %s\n  %-15s from: %s\n", p.name, p.summary, "",
               p.defaults[0] ? p.defaults : "(no parameters)", "", p.paper);
    }
    if (!a->json)
        printf("\nbudget: a ratio of the tokens seen (0.2; 1.0 never evicts) or a count per head (1024).\n"
               "example: --kv snapkv:budget=0.2+decode=h2o\n");
    return a->json ? print_json(arr) : 0;
}

const struct command policies_command = {
    .name = "policies",
    .summary = "List the KV cache policies --kv accepts, with their parameters and defaults.",
    .usage = "[--json]",
    .details = "Every (layer, kv head) keeps the entries its rule scores best once the prompt is in;\n"
               "evicted entries are freed. Syntax: --kv NAME[:key=value,...].",
    .run = cmd_policies,
    .opts = policies_opts,
    .no_model = true,
};
