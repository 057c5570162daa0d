#include "core/sys.h"

#include "core/common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

double sys_time_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* VmHWM is the kernel's own high-water mark of resident memory; getrusage's
 * ru_maxrss (KiB on Linux) is the fallback where /proc is not mounted. */
size_t kvf_peak_rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (f) {
        char line[256];
        unsigned long long kib = 0;
        bool found = false;
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "VmHWM:", 6) == 0) {
                found = sscanf(line + 6, "%llu", &kib) == 1;
                break;
            }
        }
        fclose(f);
        if (found)
            return (size_t)kib * 1024;
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0 && ru.ru_maxrss > 0)
        return (size_t)ru.ru_maxrss * 1024;
    return 0;
}

char *sys_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

bool sys_path_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool sys_path_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int sys_open_read(const char *path) {
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    const int fl = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
    if (fd >= 0 && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)) {
        const int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

FILE *sys_fopen_read(const char *path) {
    const int fd = sys_open_read(path);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (fd >= 0 && !f) {
        const int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

enum kvf_status sys_read_file(const char *path, size_t cap, const char *what, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    FILE *f = sys_fopen_read(path);
    if (!f) return err_set(KVF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    enum kvf_status st = KVF_OK;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode))
        st = err_set(KVF_ERR_IO, "%s: not a regular file", path);
    else if (sb.st_size < 0 || (uint64_t)sb.st_size > cap)
        st = err_set(KVF_ERR_FORMAT, "%s: %lld bytes is over the limit for %s (%zu MiB)", path,
                     (long long)sb.st_size, what, cap >> 20);
    char *buf = st == KVF_OK ? malloc((size_t)sb.st_size + 1) : NULL;
    if (st == KVF_OK && !buf) st = err_set(KVF_ERR_NOMEM, "%s: out of memory", path);
    if (st == KVF_OK) {
        const size_t n = (size_t)sb.st_size, got = fread(buf, 1, n, f);
        if (ferror(f) || got != n) {
            st = err_set(KVF_ERR_IO, "%s: read failed", path);
        } else {
            buf[n] = '\0';
            *out = buf;
            *len = n;
            buf = NULL;
        }
    }
    free(buf);
    fclose(f);
    return st;
}

/* The whole pages inside [p, p + n): *a .. *b, empty when b <= a. */
static void inner_pages(const void *p, size_t n, uintptr_t *a, uintptr_t *b) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    *a = ((uintptr_t)p + page - 1) / page * page;
    *b = ((uintptr_t)p + n) / page * page;
}

void sys_release_pages(const void *p, size_t n) {
    uintptr_t a, b;
    inner_pages(p, n, &a, &b);
    if (b > a)
        madvise((void *)a, b - a, MADV_DONTNEED);
}

void sys_prefault(void *p, size_t n) {
#ifdef MADV_POPULATE_WRITE
    uintptr_t a, b;
    inner_pages(p, n, &a, &b);
    if (b > a)
        madvise((void *)a, b - a, MADV_POPULATE_WRITE);
#else
    (void)p, (void)n;
#endif
}
