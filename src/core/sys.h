/* Process-level helpers: clocks, memory statistics, the file system. */
#ifndef KVF_SYS_H
#define KVF_SYS_H

#include "kvfold.h"

#include <stdbool.h>
#include <stdio.h>

/* Milliseconds on a monotonic clock with an arbitrary origin; only
 * differences are meaningful. */
double sys_time_ms(void);

/* A malloc'd "dir/name" (NULL when out of memory). */
char *sys_path_join(const char *dir, const char *name);
/* Whether path names a directory / a regular file (links followed). */
bool sys_path_is_dir(const char *path);
bool sys_path_is_file(const char *path);

/* open(path, O_RDONLY) / fopen(path, "rb") that do not wait: opening a FIFO
 * for reading blocks until a writer appears, so the file is opened
 * non-blocking and made blocking again once open. Callers still check that
 * it is a regular file (fstat). -1 / NULL with errno set. */
int sys_open_read(const char *path);
FILE *sys_fopen_read(const char *path);

/* A whole regular file in memory, NUL-terminated (*out malloc'd, *len
 * bytes before the NUL). Files over cap bytes are refused before anything
 * is allocated, with an error naming `what` (e.g. "a tokenizer.json") and
 * the cap: every file the library reads whole has one. */
enum kvf_status sys_read_file(const char *path, size_t cap, const char *what, char **out, size_t *len);

/* Tells the OS that the whole pages inside [p, p + n) of a read-only file
 * mapping are no longer needed (they are read again from the file if
 * touched), so that they leave the process's resident memory. */
void sys_release_pages(const void *p, size_t n);
/* Maps the whole pages inside [p, p + n) of fresh memory in one call
 * (Linux 5.14+, else nothing): filling a large buffer page by page costs
 * a fault every 4 KiB, which on a VM is most of the time it takes. */
void sys_prefault(void *p, size_t n);

#endif
