/* A MileBench task as the CLI reads it (tools/kvfold/lab/milebench.c): the
 * input's first line names the task (the name picks the scoring rule:
 * NeedleInAHaystack, MMCoQA, GPR1200 or the question type; "task" when the
 * line is no file name), the rest is its NAME.json. It is written to a
 * scratch task folder with one image (images/a.png), opened with
 * mb_tasks_open, and the first samples are built with mb_sample on the tiny
 * LLaVA fixture (images encoded) and scored with mb_score. */
#include "fuzz.h"
#include "lab/eval.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_SAMPLES 8

/* A 2 x 2 red PNG (Pillow, optimize=True). */
static const uint8_t red_png[] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x02, 0x00, 0x00, 0x00, 0x02, 0x08, 0x02, 0x00, 0x00, 0x00, 0xfd, 0xd4, 0x9a, 0x73, 0x00, 0x00, 0x00, 0x16, 0x49,
    0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0x3c, 0x21, 0x27, 0xc7, 0xc0, 0xc0, 0xc0, 0xc4, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0,
    0x00, 0x00, 0x0d, 0x04, 0x01, 0x08, 0x7f, 0xad, 0x82, 0x51, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
    0x42, 0x60, 0x82,
};

/* Writes dir/NAME/NAME.json and dir/NAME/images/a.png into path (the task
 * folder); false when the disk refuses. */
static bool write_task(const uint8_t *data, size_t size, char *path) {
    const uint8_t *nl = memchr(data, '\n', size);
    const size_t n = nl ? (size_t)(nl - data) : 0;
    char name[FUZZ_NAME_MAX + 8] = "task";
    if (fuzz_name_ok(data, n)) memcpy(name, data, n), name[n] = '\0';
    const uint8_t *json = nl ? nl + 1 : data;
    snprintf(path, FUZZ_PATH_MAX, "%s/%s", fuzz_scratch_dir(), name);
    char images[FUZZ_PATH_MAX + 8];
    snprintf(images, sizeof images, "%s/images", path);
    strcat(name, ".json");
    return !mkdir(path, 0700) && !mkdir(images, 0700) && fuzz_write_file(images, "a.png", red_png, sizeof red_png) &&
           fuzz_write_file(path, name, json, (size_t)(data + size - json));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const struct kvf_model *m;
    if (!m) m = fuzz_fixed_model("llava-f32.gguf", "llava-mmproj-f32.gguf", false);
    char dir[FUZZ_PATH_MAX];
    if (!write_task(data, size, dir)) return 0;
    struct args a = {.eval = {.data = dir}, .threads = 1};
    struct mb_task *tasks = NULL;
    int n_tasks = 0;
    if (mb_tasks_open(&a, &tasks, &n_tasks)) return 0;
    for (int t = 0; t < n_tasks; t++) {
        mb_task_metric(&tasks[t]);
        for (int k = 0; k < MAX_SAMPLES && k < cJSON_GetArraySize(tasks[t].data); k++) {
            struct sample s;
            if (!mb_sample(&a, m, &tasks[t], k, &s)) {
                mb_score(&s, s.answer);
                mb_score(&s, "A");
            }
            sample_free(&s);
        }
    }
    mb_tasks_free(tasks, n_tasks);
    return 0;
}
