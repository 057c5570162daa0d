/* The input format of fuzz_safetensors: several files in one input.
 *
 *   [ignored bytes] MARK NAME '\n' CONTENT MARK NAME '\n' CONTENT ...
 *
 * MARK is the five bytes "\0KVF:" (FUZZ_SPLIT_MARK); each CONTENT runs to
 * the next MARK or the end. NAME must pass fuzz_name_ok (a part with
 * another name is skipped). A later part of the same name replaces an
 * earlier one. make_seeds packs the fixture directories this way. */
#ifndef KVF_FUZZ_SPLIT_H
#define KVF_FUZZ_SPLIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FUZZ_SPLIT_MARK "\0KVF:"
#define FUZZ_SPLIT_MARK_LEN 5

/* Writes the files of data[0..size) into dir; false when one could not be
 * written (the disk, not the input, is at fault). */
bool fuzz_split_write(const uint8_t *data, size_t size, const char *dir);

#endif
