/* MileBench's scoring rules (tools/kvfold/lab/metrics.c) on cases read as JSON
 * lines from stdin, one JSON result per line on stdout, for
 * tests/ref/milebench_ref.py to compare with its Python reference:
 *   {"op": "normalise", "s": S}                      -> {"r": STRING}
 *   {"op": "rouge", "hyp": H, "ref": R}              -> {"r": F}
 *   {"op": "choice", "text": T, "choices": [...]}    -> {"r": LETTERS}
 *   {"op": "score", "rule": "needle"|"contains"|"rouge"|"choice",
 *    "pred": P, "gt": G, "choices": [...]}           -> {"r": SCORE} */
#include "lab/metrics.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

int main(void) {
    static char line[1 << 20];
    while (fgets(line, sizeof line, stdin)) {
        cJSON *o = cJSON_Parse(line), *res = cJSON_CreateObject();
        if (!o) {
            fprintf(stderr, "mb_score: not JSON: %.80s\n", line);
            return 2;
        }
        const char *op = str(o, "op");
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "choices");
        const int n = cJSON_GetArraySize(list);
        const char **choices = calloc((size_t)n + 1, sizeof *choices);
        for (int k = 0; k < n; k++) choices[k] = cJSON_GetArrayItem(list, k)->valuestring;
        if (!strcmp(op, "normalise")) {
            char *r = metrics_mb_normalise(str(o, "s"));
            cJSON_AddStringToObject(res, "r", r);
            free(r);
        } else if (!strcmp(op, "rouge")) {
            cJSON_AddNumberToObject(res, "r", metrics_mb_rouge_l(str(o, "hyp"), str(o, "ref")));
        } else if (!strcmp(op, "choice")) {
            char out[256];
            metrics_mb_choice(str(o, "text"), choices, n, out, sizeof out);
            cJSON_AddStringToObject(res, "r", out);
        } else {
            static const char *const rules[] = {"needle", "contains", "rouge", "choice"};
            int rule = 0;
            while (rule < 4 && strcmp(rules[rule], str(o, "rule"))) rule++;
            if (rule == 4) {
                fprintf(stderr, "mb_score: unknown op/rule in %.80s\n", line);
                return 2;
            }
            cJSON_AddNumberToObject(res, "r", metrics_mb_score((enum metrics_mb_rule)rule, str(o, "pred"), str(o, "gt"),
                                                               choices, n));
        }
        char *s = cJSON_PrintUnformatted(res);
        puts(s);
        free(s);
        free(choices);
        cJSON_Delete(res);
        cJSON_Delete(o);
    }
    return 0;
}
