/*
 * Known keys of a JSON object (panel/keys.h).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "panel/keys.h"
#include "supervisor/util/closest.h"

bool pn_key_is_comment(const char *key)
{
    return key[0] == '_';
}

void pn_key_path(char *buf, size_t cap, const char *parent, const char *key)
{
    int n = parent[0] == '\0' ? snprintf(buf, cap, "%.64s", key)
                              : snprintf(buf, cap, "%s.%.64s", parent, key);
    if (n < 0)
        buf[0] = '\0';
}

static bool known_key(const char *key, const char *const *known, size_t *n)
{
    size_t i = 0;
    bool found = false;
    for (; known[i] != NULL; i++)
        found |= strcmp(known[i], key) == 0;
    *n = i;
    return found;
}

int pn_keys_check(const json_t *obj, const char *prefix, const char *const *known, bool strict,
                  pn_unknown_fn unknown, void *arg, sv_error *err)
{
    const char *key;
    json_t *v;
    if (!json_is_object(obj) || (!strict && unknown == NULL))
        return 0;
    json_object_foreach((json_t *)obj, key, v) {
        size_t n;
        if (pn_key_is_comment(key) || known_key(key, known, &n))
            continue;
        char path[PN_KEY_PATH_MAX];
        pn_key_path(path, sizeof path, prefix, key);
        const char *near = sv_closest(key, known, n);
        if (!strict) {
            unknown(arg, path, near);
            continue;
        }
        if (near != NULL)
            return sv_error_set(err, -EINVAL, "%s: unknown key (did you mean \"%s\"?)", path,
                                near);
        return sv_error_set(err, -EINVAL, "%s: unknown key", path);
    }
    return 0;
}
