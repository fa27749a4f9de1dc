/*
 * Large panel bodies without a whole JSON tree. jansson builds a tree of a body at about 26
 * times the body's size: a user list of 100 MB would cost 2.6 GB before it is refused. Two
 * tools keep that down:
 *  - pn_json_check(): one pass over the text, no allocation, that refuses what json_loadb()
 *    would refuse for its syntax (truncated, garbage, control characters, bad escapes, bad
 *    UTF-8, nesting over JSON_PARSER_MAX_DEPTH), so a malformed body never becomes a tree;
 *  - pn_json_body: a body whose one large array (the users) is read one element at a time:
 *    the rest of the body is a small tree, each element is loaded, used and freed alone.
 * Both read at most the @p len bytes given (no NUL needed). What needs the decoded values
 * (duplicate keys, integers out of range, "\u0000") is still jansson's to refuse, on the
 * smaller texts it is given.
 */
#ifndef PN_JSONSCAN_H
#define PN_JSONSCAN_H

#include <stddef.h>

#include <jansson.h>

#include "supervisor/util/err.h"

/**
 * Check that @p text (@p len bytes) is one JSON text as json_loadb() reads it without flags: an
 * object or an array, strings without raw control characters, with valid escapes (surrogate
 * pairs included) and valid UTF-8, numbers and literals of RFC 8259, at most
 * JSON_PARSER_MAX_DEPTH nested arrays and objects, then only white space.
 * @param err  on failure, "<reason> at byte <offset>" (the offset counts from 0; no bytes of
 *             the text are quoted: they may be a user's secret)
 * @return 0, or -EINVAL.
 */
int pn_json_check(const char *text, size_t len, sv_error *err);

/** A body with the array of one top-level member apart (see pn_json_body_load()). */
typedef struct pn_json_body {
    json_t *root;     /**< the body's tree, with [] in place of the array that is apart */
    const char *text; /**< the borrowed text */
    size_t len;
    size_t open;      /**< offset of the '[' of the array apart; 0 when none is */
    size_t close;     /**< offset of its ']' */
    size_t n;         /**< elements of that array */
    size_t next;      /**< offset where pn_json_body_next() looks for the next element */
    size_t taken;     /**< elements given so far */
} pn_json_body;

/**
 * Read @p text (@p len bytes, borrowed until pn_json_body_free()) as
 * json_loadb(JSON_REJECT_DUPLICATES) does, except that when the body is an object whose member
 * @p key (the first of that name) is an array, that array's elements are not loaded: root holds
 * an empty array there, and pn_json_body_next() gives them one by one (b->n of them). The whole
 * text is checked first (pn_json_check()), so a malformed body builds no tree at all.
 * @param err  on -EBADMSG: why the text is not JSON, pn_json_check()'s reason or jansson's text
 *             without its "near '...'" part (which may quote a secret)
 * @return 0, -EBADMSG (not JSON) or -ENOMEM; on failure *b is zeroed.
 */
int pn_json_body_load(pn_json_body *b, const char *text, size_t len, const char *key,
                      sv_error *err);

/**
 * The next element of the array apart, as a new reference in @p out (the caller decrefs it).
 * @return 0; 1 when every element was given (or none is apart); -EBADMSG (jansson refused the
 *         element: err set as for pn_json_body_load()) or -ENOMEM.
 */
int pn_json_body_next(pn_json_body *b, json_t **out, sv_error *err);

/**
 * Element @p i of @p list, walked in order from 0: from the tree (@p src NULL, or it splits no
 * array), or the next one of @p src's array apart (pn_json_body_next) as a new reference in
 * @p own, which the caller decrefs (NULL otherwise). @p what names the array in the error when
 * the text holds fewer elements than counted ("users", "data").
 * @return 0, -EINVAL (fewer elements), or pn_json_body_next()'s errors.
 */
int pn_json_body_at(const json_t *list, pn_json_body *src, size_t i, const char *what,
                    const json_t **v, json_t **own, sv_error *err);

/** Free the tree and zero @p b. NULL-safe. */
void pn_json_body_free(pn_json_body *b);

#endif
