/*
 * Known keys of a JSON object: one table per object, checked by one function that names an
 * unknown key's full path and the known key nearest to it (supervisor/util/closest.h). Strict
 * for what the operator writes (katana.json, a local panel's bodies: the first unknown key is
 * refused), reporting for what a panel sends (each unknown key is handed to a callback, for
 * one warning; panels add keys all the time).
 */
#ifndef PN_KEYS_H
#define PN_KEYS_H

#include <stdbool.h>

#include <jansson.h>

#include "supervisor/util/err.h"

/** Longest key path the texts carry (the prefix and the key, cut beyond). */
#define PN_KEY_PATH_MAX 192

/**
 * An unknown key found in a reporting check.
 * @param path     the key's full path ("tls_settings.shortid"), valid during the call
 * @param closest  the known key nearest to it (one of the table's, static), or NULL
 */
typedef void (*pn_unknown_fn)(void *arg, const char *path, const char *closest);

/**
 * Whether @p key is a comment: a key starting with '_' ("_comment", "_note") is ignored in every
 * object, so that a file can carry notes (JSON has no comments). katana.json(5) DESCRIPTION.
 */
bool pn_key_is_comment(const char *key);

/**
 * Check every key of the object @p obj against @p known (NULL-terminated, static), comments
 * (pn_key_is_comment) aside.
 * @param prefix   the object's path, "" at the top ("nodes[0].panel", "tls_settings")
 * @param strict   refuse the first unknown key, in the object's order
 * @param unknown  when not @p strict: called for each unknown key; NULL: none is reported
 * @param err      with @p strict: "<prefix>.<key>: unknown key (did you mean \"<closest>\"?)",
 *                 the parenthesis only when a known key is near (sv_closest)
 * @return 0, or -EINVAL (strict only). A non-object @p obj has no key: 0.
 */
int pn_keys_check(const json_t *obj, const char *prefix, const char *const *known, bool strict,
                  pn_unknown_fn unknown, void *arg, sv_error *err);

/** "<parent>.<key>" (or "<key>" when @p parent is "") into @p buf of @p cap bytes, a key of at
 *  most 64 bytes; a path too long for @p buf is cut short. */
void pn_key_path(char *buf, size_t cap, const char *parent, const char *key);

#endif
