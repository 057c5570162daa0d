/* Process-level helpers: clocks, memory statistics, the file system. */
#ifndef KVF_SYS_H
#define KVF_SYS_H

#include <stdbool.h>

/* Milliseconds on a monotonic clock with an arbitrary origin; only
 * differences are meaningful. */
double sys_time_ms(void);

/* Whether path names a directory / a regular file (links followed). */
bool sys_path_is_dir(const char *path);
bool sys_path_is_file(const char *path);

#endif
