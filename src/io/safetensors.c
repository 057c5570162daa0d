/* safetensors reader and writer.
 *
 * A safetensors file is an 8-byte little-endian header length N, N bytes of
 * JSON ({name: {"dtype", "shape", "data_offsets": [begin, end]}} plus an
 * optional "__metadata__"), then the data buffer the offsets point into.
 * Every number in the header is checked against the file before a tensor is
 * handed out, so a hostile file gives an error instead of an out-of-bounds
 * pointer. */
#include "io/safetensors.h"
#include "core/sys.h"
#include "io/json.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reference implementation refuses headers above 100 MB; real ones are a
 * few MB at most. */
#define ST_MAX_HEADER ((uint64_t)100 << 20)
/* Integers above 2^53 do not survive cJSON's double representation. */
#define ST_MAX_JSON_INT 9007199254740992.0

struct st_map {
    void *addr; /* NULL for a caller-owned buffer */
    size_t size;
};

struct st_name { const char *name; int idx; };

struct st_set {
    struct st_tensor *tensors; /* [n], in file order (shard by shard) */
    int *shard;                /* [n]: index into maps of each tensor's file */
    struct st_name *by_name;   /* [n]: sorted by name, for st_find */
    int n, cap;
    struct st_map *maps;       /* [n_maps], owned mappings */
    int n_maps;
};

/* ----------------------------------------------------------- helpers -- */

static bool json_is_uint(const cJSON *v) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    return isfinite(d) && d >= 0 && d <= ST_MAX_JSON_INT && d == floor(d);
}

/* ------------------------------------------------------------ dtypes -- */

static const struct {
    const char *name;
    enum dtype type;
    size_t size;
} st_dtypes[] = {
    {"F32", DT_F32, 4},
    {"F16", DT_F16, 2},
    {"BF16", DT_BF16, 2},
};

/* Valid safetensors dtypes kvfold does not read: UNSUPPORTED rather than FORMAT. */
static const char *const st_other_dtypes[] = {
    "BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64", "F64",
    "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64",
};

static int st_dtype_index(enum dtype t) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (st_dtypes[i].type == t) return (int)i;
    return -1;
}

/* ------------------------------------------------------------ parser -- */

static enum kvf_status set_reserve(struct st_set *s, int more) {
    if (s->n + more <= s->cap) return KVF_OK;
    if (more > INT32_MAX / 2 - s->n) return err_set(KVF_ERR_FORMAT, "too many tensors");
    int cap = KVF_MAX(s->cap * 2, s->n + more);
    struct st_tensor *t = realloc(s->tensors, (size_t)cap * sizeof *t);
    if (!t) return err_set(KVF_ERR_NOMEM, "out of memory for the tensor table");
    s->tensors = t;
    int *sh = realloc(s->shard, (size_t)cap * sizeof *sh);
    if (!sh) return err_set(KVF_ERR_NOMEM, "out of memory for the tensor table");
    s->shard = sh;
    s->cap = cap;
    return KVF_OK;
}

struct st_range { size_t begin, end; const char *name; };

static int range_cmp(const void *a, const void *b) {
    const struct st_range *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Fills t (except the name) from one header entry; data is the data buffer. */
static enum kvf_status entry_parse(const char *label, const char *name, const cJSON *e,
                                   const uint8_t *data, size_t data_len, struct st_tensor *t,
                                   struct st_range *r) {
    if (!cJSON_IsObject(e))
        return err_set(KVF_ERR_FORMAT, "%s: tensor '%.128s': entry is not an object", label, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt))
        return err_set(KVF_ERR_FORMAT, "%s: tensor '%.128s': missing or non-string \"dtype\"", label, name);

    int di = -1;
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(dt->valuestring, st_dtypes[i].name) == 0) di = (int)i;
    if (di < 0) {
        for (size_t i = 0; i < sizeof st_other_dtypes / sizeof st_other_dtypes[0]; i++)
            if (strcmp(dt->valuestring, st_other_dtypes[i]) == 0)
                return err_set(KVF_ERR_UNSUPPORTED,
                               "%s: tensor '%.128s': dtype %s is not supported (F32, F16, BF16 are)",
                               label, name, dt->valuestring);
        return err_set(KVF_ERR_FORMAT, "%s: tensor '%.128s': unknown dtype '%.32s'", label, name,
                       dt->valuestring);
    }

    if (!cJSON_IsArray(shape))
        return err_set(KVF_ERR_FORMAT, "%s: tensor '%.128s': missing or non-array \"shape\"", label, name);
    int nd = cJSON_GetArraySize(shape);
    if (nd > ST_MAX_DIMS)
        return err_set(KVF_ERR_FORMAT, "%s: tensor '%.128s': %d dimensions (at most %d)", label, name,
                       nd, ST_MAX_DIMS);
    size_t nbytes = st_dtypes[di].size, nonzero = 1;
    int k = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, shape) {
        if (!json_is_uint(d))
            return err_set(KVF_ERR_FORMAT, "%s: tensor '%.128s': shape[%d] is not a non-negative integer",
                           label, name, k);
        t->shape[k] = (int64_t)d->valuedouble;
        /* a zero dimension makes the bytes 0 whatever the others are: they must still multiply (the
         * loader folds and multiplies dimensions in int64) */
        if (!size_mul(nbytes, (size_t)t->shape[k], &nbytes) ||
            (t->shape[k] > 0 && (!size_mul(nonzero, (size_t)t->shape[k], &nonzero) || nonzero > (size_t)1 << 53)))
            return err_set(KVF_ERR_FORMAT, "%s: tensor '%.128s': shape overflows", label, name);
        k++;
    }
    for (int i = nd; i < ST_MAX_DIMS; i++) t->shape[i] = 0;

    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return err_set(KVF_ERR_FORMAT, "%s: tensor '%.128s': \"data_offsets\" must be [begin, end]",
                       label, name);
    const cJSON *b = offs->child, *en = b->next;
    if (!json_is_uint(b) || !json_is_uint(en))
        return err_set(KVF_ERR_FORMAT, "%s: tensor '%.128s': data_offsets are not non-negative integers",
                       label, name);
    size_t begin = (size_t)b->valuedouble, end = (size_t)en->valuedouble;
    if (begin > end || end > data_len)
        return err_set(KVF_ERR_FORMAT,
                       "%s: tensor '%.128s': data_offsets [%zu, %zu] outside the data buffer (%zu bytes)",
                       label, name, begin, end, data_len);
    if (end - begin != nbytes)
        return err_set(KVF_ERR_FORMAT,
                       "%s: tensor '%.128s': %zu bytes in data_offsets but dtype and shape need %zu",
                       label, name, end - begin, nbytes);

    t->type = st_dtypes[di].type;
    t->n_dims = nd;
    t->data = data + begin;
    t->nbytes = nbytes;
    r->begin = begin;
    r->end = end;
    r->name = name;
    return KVF_OK;
}

/* Parses one file held in buf[0..size) and appends its tensors to s. */
static enum kvf_status shard_parse(struct st_set *s, const char *label, const uint8_t *buf,
                                   size_t size, int shard) {
    if (size < 8)
        return err_set(KVF_ERR_FORMAT, "%s: %zu bytes, too short for a safetensors file", label, size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | buf[i];
    if (hlen > size - 8)
        return err_set(KVF_ERR_FORMAT, "%s: header length %llu exceeds the file (%zu bytes)", label,
                       (unsigned long long)hlen, size);
    if (hlen > ST_MAX_HEADER)
        return err_set(KVF_ERR_FORMAT, "%s: header length %llu is above the %llu-byte limit", label,
                       (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
    const char *hdr = (const char *)buf + 8;
    const uint8_t *data = buf + 8 + hlen;
    size_t data_len = size - 8 - (size_t)hlen;

    cJSON *root;
    enum kvf_status st = json_parse_text(label, hdr, (size_t)hlen, &root);
    if (st) return st;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return err_set(KVF_ERR_FORMAT, "%s: header is not a JSON object", label);
    }
    int n_entries = cJSON_GetArraySize(root);
    struct st_range *ranges = malloc((size_t)KVF_MAX(n_entries, 1) * sizeof *ranges);
    if (!ranges) {
        cJSON_Delete(root);
        return err_set(KVF_ERR_NOMEM, "%s: out of memory", label);
    }
    st = set_reserve(s, n_entries);
    int n_ranges = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (st) break;
        const char *name = e->string;
        if (strcmp(name, "__metadata__") == 0) {
            if (!cJSON_IsObject(e))
                st = err_set(KVF_ERR_FORMAT, "%s: __metadata__ is not an object", label);
            continue;
        }
        struct st_tensor *t = &s->tensors[s->n];
        st = entry_parse(label, name, e, data, data_len, t, &ranges[n_ranges]);
        if (st) break;
        t->name = strdup(name);
        if (!t->name) {
            st = err_set(KVF_ERR_NOMEM, "%s: out of memory", label);
            break;
        }
        ranges[n_ranges].name = t->name;
        s->shard[s->n++] = shard;
        n_ranges++;
    }
    if (!st) {
        /* Tensors must not alias each other's bytes; empty tensors cannot. */
        qsort(ranges, (size_t)n_ranges, sizeof *ranges, range_cmp);
        size_t prev_end = 0;
        const char *prev = NULL;
        for (int i = 0; i < n_ranges; i++) {
            if (ranges[i].begin == ranges[i].end) continue;
            if (prev && ranges[i].begin < prev_end) {
                st = err_set(KVF_ERR_FORMAT, "%s: tensors '%.128s' and '%.128s' overlap", label, prev,
                             ranges[i].name);
                break;
            }
            prev_end = ranges[i].end;
            prev = ranges[i].name;
        }
    }
    free(ranges);
    cJSON_Delete(root);
    return st;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(((const struct st_name *)a)->name, ((const struct st_name *)b)->name);
}

/* Builds the sorted name index and rejects duplicate names (cJSON keeps
 * duplicate keys, and two shards may both claim a tensor). */
static enum kvf_status set_index(struct st_set *s, const char *label) {
    s->by_name = malloc((size_t)KVF_MAX(s->n, 1) * sizeof *s->by_name);
    if (!s->by_name) return err_set(KVF_ERR_NOMEM, "%s: out of memory", label);
    for (int i = 0; i < s->n; i++) s->by_name[i] = (struct st_name){s->tensors[i].name, i};
    qsort(s->by_name, (size_t)s->n, sizeof *s->by_name, name_cmp);
    for (int i = 1; i < s->n; i++)
        if (strcmp(s->by_name[i - 1].name, s->by_name[i].name) == 0)
            return err_set(KVF_ERR_FORMAT, "%s: tensor '%.128s' appears twice", label, s->by_name[i].name);
    return KVF_OK;
}

static int find_index(const struct st_set *s, const char *name) {
    struct st_name key = {name, 0};
    const struct st_name *hit = bsearch(&key, s->by_name, (size_t)s->n, sizeof key, name_cmp);
    return hit ? hit->idx : -1;
}

/* ------------------------------------------------------ opening files -- */

static struct st_set *set_new(void) { return calloc(1, sizeof(struct st_set)); }

/* Maps path read-only, records the mapping in s and parses it as shard
 * number s->n_maps. */
static enum kvf_status shard_open(struct st_set *s, const char *path) {
    int fd = sys_open_read(path);
    if (fd < 0) return err_set(KVF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return err_set(KVF_ERR_IO, "%s: not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    if (size < 8) {
        close(fd);
        return err_set(KVF_ERR_FORMAT, "%s: %zu bytes, too short for a safetensors file", path, size);
    }
    void *addr = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (addr == MAP_FAILED) return err_set(KVF_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
    struct st_map *m = realloc(s->maps, (size_t)(s->n_maps + 1) * sizeof *m);
    if (!m) {
        munmap(addr, size);
        return err_set(KVF_ERR_NOMEM, "%s: out of memory", path);
    }
    s->maps = m;
    s->maps[s->n_maps] = (struct st_map){addr, size};
    int shard = s->n_maps++;
    return shard_parse(s, path, addr, size, shard);
}

/* A shard name from an index must stay inside the model directory. */
static bool shard_name_ok(const char *name) {
    return name[0] != '\0' && !strchr(name, '/') && !strchr(name, '\\') && !strstr(name, "..");
}

static int str_ptr_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static enum kvf_status index_open(struct st_set *s, const char *dir, const char *index_path) {
    cJSON *root;
    enum kvf_status st = json_load_file(index_path, &root);
    if (st) return st;

    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    const char **files = NULL;
    int n_files = 0;
    if (!cJSON_IsObject(root) || !cJSON_IsObject(wm)) {
        st = err_set(KVF_ERR_FORMAT, "%s: no \"weight_map\" object", index_path);
        goto done;
    }
    int n = cJSON_GetArraySize(wm);
    if (n == 0) {
        st = err_set(KVF_ERR_FORMAT, "%s: empty weight_map", index_path);
        goto done;
    }
    files = malloc((size_t)n * sizeof *files);
    if (!files) {
        st = err_set(KVF_ERR_NOMEM, "%s: out of memory", index_path);
        goto done;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, wm) {
        if (!cJSON_IsString(e)) {
            st = err_set(KVF_ERR_FORMAT, "%s: weight_map['%.128s'] is not a string", index_path, e->string);
            goto done;
        }
        if (!shard_name_ok(e->valuestring)) {
            st = err_set(KVF_ERR_FORMAT, "%s: shard name '%.128s' is not a plain file name", index_path,
                         e->valuestring);
            goto done;
        }
        files[n_files++] = e->valuestring;
    }
    qsort(files, (size_t)n_files, sizeof *files, str_ptr_cmp);
    int n_unique = 0;
    for (int i = 0; i < n_files; i++)
        if (n_unique == 0 || strcmp(files[n_unique - 1], files[i]) != 0) files[n_unique++] = files[i];

    /* Shard k of the set is files[k], so weight_map entries can be checked
     * against the shard each tensor was found in. */
    for (int i = 0; i < n_unique && !st; i++) {
        char *p = sys_path_join(dir, files[i]);
        if (!p) {
            st = err_set(KVF_ERR_NOMEM, "out of memory");
            break;
        }
        st = shard_open(s, p);
        free(p);
    }
    if (!st) st = set_index(s, index_path);
    if (st) goto done;

    cJSON_ArrayForEach(e, wm) {
        int ti = find_index(s, e->string);
        if (ti < 0) {
            st = err_set(KVF_ERR_FORMAT, "%s: tensor '%.128s' is not in shard %.128s", index_path, e->string,
                         e->valuestring);
            goto done;
        }
        const char **f = bsearch(&e->valuestring, files, (size_t)n_unique, sizeof *files, str_ptr_cmp);
        if (f - files != s->shard[ti]) {
            st = err_set(KVF_ERR_FORMAT, "%s: tensor '%.128s' is listed in %.128s but stored in %.128s",
                         index_path, e->string, e->valuestring, files[s->shard[ti]]);
            goto done;
        }
    }
    /* cJSON keeps duplicate keys; a name listed twice is ambiguous. */
    const char **names = files; /* reuse: n >= number of keys */
    int k = 0;
    cJSON_ArrayForEach(e, wm) names[k++] = e->string;
    qsort(names, (size_t)k, sizeof *names, str_ptr_cmp);
    for (int i = 1; i < k; i++)
        if (strcmp(names[i - 1], names[i]) == 0) {
            st = err_set(KVF_ERR_FORMAT, "%s: tensor '%.128s' is listed twice in weight_map", index_path,
                         names[i]);
            break;
        }
done:
    free(files);
    cJSON_Delete(root);
    return st;
}

enum kvf_status st_open(const char *path, struct st_set **out) {
    if (!path || !out) return err_set(KVF_ERR_INVALID_ARG, "st_open: NULL argument");
    *out = NULL;
    struct st_set *s = set_new();
    if (!s) return err_set(KVF_ERR_NOMEM, "out of memory");
    enum kvf_status st;
    if (sys_path_is_dir(path)) {
        char *single = sys_path_join(path, "model.safetensors");
        char *index = sys_path_join(path, "model.safetensors.index.json");
        if (!single || !index) st = err_set(KVF_ERR_NOMEM, "out of memory");
        else if (sys_path_is_file(single)) {
            st = shard_open(s, single);
            if (!st) st = set_index(s, single);
        } else if (sys_path_is_file(index)) {
            st = index_open(s, path, index);
        } else {
            st = err_set(KVF_ERR_IO, "%s: no model.safetensors or model.safetensors.index.json", path);
        }
        free(single);
        free(index);
    } else {
        st = shard_open(s, path);
        if (!st) st = set_index(s, path);
    }
    if (st) {
        st_close(s);
        return st;
    }
    *out = s;
    return KVF_OK;
}

enum kvf_status st_open_buffer(const void *buf, size_t size, struct st_set **out) {
    if (!out || (!buf && size)) return err_set(KVF_ERR_INVALID_ARG, "st_open_buffer: NULL argument");
    *out = NULL;
    struct st_set *s = set_new();
    if (!s) return err_set(KVF_ERR_NOMEM, "out of memory");
    enum kvf_status st = shard_parse(s, "<buffer>", buf, size, 0);
    if (!st) st = set_index(s, "<buffer>");
    if (st) {
        st_close(s);
        return st;
    }
    *out = s;
    return KVF_OK;
}

void st_close(struct st_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) free(s->tensors[i].name);
    for (int i = 0; i < s->n_maps; i++) munmap(s->maps[i].addr, s->maps[i].size);
    free(s->tensors);
    free(s->shard);
    free(s->by_name);
    free(s->maps);
    free(s);
}

int st_count(const struct st_set *s) { return s ? s->n : 0; }

const struct st_tensor *st_at(const struct st_set *s, int i) {
    return s && i >= 0 && i < s->n ? &s->tensors[i] : NULL;
}

const struct st_tensor *st_find(const struct st_set *s, const char *name) {
    if (!s || !name) return NULL;
    int i = find_index(s, name);
    return i < 0 ? NULL : &s->tensors[i];
}

/* ------------------------------------------------------------ writer -- */

static enum kvf_status tensor_check(const struct st_tensor *t, int i) {
    if (!t->name) return err_set(KVF_ERR_INVALID_ARG, "st_write: tensor %d has no name", i);
    if (strcmp(t->name, "__metadata__") == 0)
        return err_set(KVF_ERR_INVALID_ARG, "st_write: '__metadata__' is reserved");
    int di = st_dtype_index(t->type);
    if (di < 0)
        return err_set(KVF_ERR_UNSUPPORTED, "st_write: tensor '%.128s': dtype %d cannot be written",
                       t->name, (int)t->type);
    if (t->n_dims < 0 || t->n_dims > ST_MAX_DIMS)
        return err_set(KVF_ERR_INVALID_ARG, "st_write: tensor '%.128s': %d dimensions", t->name, t->n_dims);
    size_t nbytes = st_dtypes[di].size;
    for (int d = 0; d < t->n_dims; d++) {
        if (t->shape[d] < 0 || (double)t->shape[d] > ST_MAX_JSON_INT ||
            !size_mul(nbytes, (size_t)t->shape[d], &nbytes))
            return err_set(KVF_ERR_INVALID_ARG, "st_write: tensor '%.128s': bad shape", t->name);
    }
    if (nbytes != t->nbytes)
        return err_set(KVF_ERR_INVALID_ARG, "st_write: tensor '%.128s': nbytes %zu but shape needs %zu",
                       t->name, t->nbytes, nbytes);
    return KVF_OK;
}

/* Returns the malloc'd header JSON (unpadded) for the tensors laid out back
 * to back in the given order. */
static enum kvf_status header_build(const struct st_tensor *tensors, int n, char **out) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return err_set(KVF_ERR_NOMEM, "st_write: out of memory");
    size_t off = 0;
    enum kvf_status st = KVF_OK;
    for (int i = 0; i < n && !st; i++) {
        const struct st_tensor *t = &tensors[i];
        size_t end = 0;
        if (!size_add(off, t->nbytes, &end) || (double)end > ST_MAX_JSON_INT) {
            st = err_set(KVF_ERR_INVALID_ARG, "st_write: total size overflows");
            break;
        }
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        cJSON *shape = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
        cJSON *offs = e ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
        bool ok = e && shape && offs &&
                  cJSON_AddStringToObject(e, "dtype", st_dtypes[st_dtype_index(t->type)].name);
        for (int d = 0; ok && d < t->n_dims; d++)
            ok = cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        ok = ok && cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off)) &&
             cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)end));
        if (!ok) st = err_set(KVF_ERR_NOMEM, "st_write: out of memory");
        off = end;
    }
    char *text = st ? NULL : cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (st) return st;
    if (!text) return err_set(KVF_ERR_NOMEM, "st_write: out of memory");
    *out = text;
    return KVF_OK;
}

enum kvf_status st_write(const char *path, const struct st_tensor *tensors, int n) {
    if (!path || n < 0 || (n > 0 && !tensors))
        return err_set(KVF_ERR_INVALID_ARG, "st_write: bad arguments");
    for (int i = 0; i < n; i++) {
        enum kvf_status st = tensor_check(&tensors[i], i);
        if (st) return st;
    }
    const char **names = malloc((size_t)KVF_MAX(n, 1) * sizeof *names);
    if (!names) return err_set(KVF_ERR_NOMEM, "st_write: out of memory");
    for (int i = 0; i < n; i++) names[i] = tensors[i].name;
    qsort(names, (size_t)n, sizeof *names, str_ptr_cmp);
    for (int i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) {
            enum kvf_status st =
                err_set(KVF_ERR_INVALID_ARG, "st_write: tensor name '%.128s' repeated", names[i]);
            free(names);
            return st;
        }
    free(names);

    char *hdr = NULL;
    enum kvf_status st = header_build(tensors, n, &hdr);
    if (st) return st;
    /* Pad with spaces so the data buffer starts 8-byte aligned, as the
     * reference writer does. */
    size_t hlen = strlen(hdr), padded = (hlen + 7) & ~(size_t)7;
    uint8_t lenbuf[8];
    for (int i = 0; i < 8; i++) lenbuf[i] = (uint8_t)((uint64_t)padded >> (8 * i));

    FILE *f = fopen(path, "wb");
    if (!f) {
        st = err_set(KVF_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        free(hdr);
        return st;
    }
    bool ok = fwrite(lenbuf, 1, 8, f) == 8 && fwrite(hdr, 1, hlen, f) == hlen;
    for (size_t i = hlen; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
    size_t total = 8 + padded;
    for (int i = 0; ok && i < n; i++) {
        total += tensors[i].nbytes;
        if (!tensors[i].data) /* a hole: zeros that take no disk space */
            ok = fseeko(f, (off_t)tensors[i].nbytes, SEEK_CUR) == 0;
        else
            ok = tensors[i].nbytes == 0 || fwrite(tensors[i].data, 1, tensors[i].nbytes, f) == tensors[i].nbytes;
    }
    ok = ok && fflush(f) == 0 && ftruncate(fileno(f), (off_t)total) == 0;
    ok = (fclose(f) == 0) && ok;
    free(hdr);
    if (!ok) {
        remove(path);
        return err_set(KVF_ERR_IO, "%s: write failed", path);
    }
    return KVF_OK;
}
