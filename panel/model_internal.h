/*
 * Helpers the panel-model files share (panel/model.c and panel/node_body.c define them; the
 * body parsers of panel/ use them). Not for other modules: they are the parsers' building
 * blocks, errors named by @p path.
 */
#ifndef PN_MODEL_INTERNAL_H
#define PN_MODEL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "supervisor/util/err.h"

/** A malloc'ed copy of @p n bytes of @p s, NUL-terminated; NULL when out of memory. */
char *pn__dup_n(const char *s, size_t n);

/** *@p dst = a copy of @p src (NULL stays NULL). @return 0 or -ENOMEM (*dst NULL). */
int pn__dup_opt(char **dst, const char *src);

/**
 * A JSON string of at most @p max bytes into a new heap string *@p out.
 * @return 0; -EINVAL "<path>: expected a string", -EMSGSIZE "<path>: longer than N bytes",
 *         -ENOMEM.
 */
int pn__take_string(const json_t *v, const char *path, size_t max, char **out, sv_error *err);

/**
 * A non-negative integer no larger than @p max from a JSON integer or, when @p allow_string, a
 * string of digits ("60"); the caller handles null and absent.
 * @return 0 or -EINVAL naming @p path ("must not be negative", "expected a number",
 *         "expected an integer", "must be at most N").
 */
int pn__get_uint(const json_t *v, const char *path, uint64_t max, bool allow_string,
                 uint64_t *out, sv_error *err);

/** With PN_PARSE_STRICT in @p flags, every key of @p obj must be in @p known (NULL-terminated),
 *  comments aside; @p prefix names @p obj ("" at the top). pn_keys_check() (panel/keys.h)
 *  strict. @return 0 or -EINVAL "<path>: unknown key (did you mean \"<closest>\"?)". */
int pn__check_keys(const json_t *obj, unsigned flags, const char *prefix,
                   const char *const *known, sv_error *err);

/** The unknown keys of a panel's node body, listed into @p node->unknown (pn_node.unknown). */
typedef struct pn__unknown_list {
    struct pn_node *node;
    unsigned n;  /**< keys listed (PN_UNKNOWN_MAX at most) */
    int failed;  /**< -ENOMEM once a line could not be added, else 0 */
} pn__unknown_list;

/** pn_unknown_fn (panel/keys.h) with @p arg a pn__unknown_list: one more line
 *  "<path>[ (did you mean \"<closest>\"?)]\n" of its node's unknown, until PN_UNKNOWN_MAX. */
void pn__list_unknown(void *arg, const char *path, const char *closest);

#endif
