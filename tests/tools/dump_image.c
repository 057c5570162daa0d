/* Decodes an image and writes its pixels for tests/ref/image_decode_ref.py
 * to compare with Pillow: a line "W H" then W*H*3 bytes of RGB. On failure
 * the status name and message go to stderr and the exit status is 1. Either
 * way the process's peak RSS (VmHWM: after exec, unlike the parent's
 * wait4 figure) is printed on stdout.
 *
 * usage: dump_image IMAGE OUT.rgb [MAX_PIXELS] */
#include "kvfold.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: dump_image IMAGE OUT.rgb [MAX_PIXELS]\n");
        return 2;
    }
    const long long max_pixels = argc == 4 ? atoll(argv[3]) : 0;
    struct kvf_image *img;
    const enum kvf_status st = kvf_image_load(argv[1], max_pixels, &img);
    if (st) {
        fprintf(stderr, "%s: %s\n", kvf_status_str(st), kvf_last_error());
        printf("peak_rss %zu\n", kvf_peak_rss_bytes());
        return 1;
    }
    const int w = kvf_image_width(img), h = kvf_image_height(img);
    FILE *f = fopen(argv[2], "wb");
    const size_t n = (size_t)w * h * 3;
    const int ok = f && fprintf(f, "%d %d\n", w, h) > 0 && fwrite(kvf_image_rgb(img), 1, n, f) == n;
    kvf_image_free(img);
    printf("peak_rss %zu\n", kvf_peak_rss_bytes());
    if (!f || fclose(f) != 0 || !ok) {
        fprintf(stderr, "dump_image: cannot write %s\n", argv[2]);
        return 1;
    }
    return 0;
}
