/*
 * Bounded JSON scanning for large panel bodies (panel/jsonscan.h).
 * The check is a state machine over one byte at a time with the open containers in a bit
 * stack (JSON_PARSER_MAX_DEPTH bits): no allocation, no recursion, O(len). The splitting of a
 * body relies on the check having passed: it only finds where values end.
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "panel/jsonscan.h"
#include "supervisor/util/digits.h"

#define DEPTH_MAX JSON_PARSER_MAX_DEPTH /* jansson's: a scalar counts as one level too */
#define KEY_DECODE_MAX 256u            /* a key with escapes longer than this never matches */

static bool is_ws(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

typedef struct cursor {
    const unsigned char *t;
    size_t i, n;
    const char *why; /* set when the scan failed, at t[i] */
} cursor;

static bool fail(cursor *c, const char *why)
{
    c->why = why;
    return false;
}

/* Four hex digits at t[i] (i advanced past them) into *v. */
static bool hex4(cursor *c, unsigned *v)
{
    if (c->n - c->i < 4)
        return fail(c, "premature end of input");
    unsigned x = 0;
    for (int k = 0; k < 4; k++) {
        int h = sv_hex_digit(c->t[c->i + (size_t)k]);
        if (h < 0)
            return fail(c, "invalid escape");
        x = x << 4 | (unsigned)h;
    }
    c->i += 4;
    *v = x;
    return true;
}

/* The escape after a backslash at t[i - 1]: jansson's rules (no \u0000, paired surrogates). */
static bool escape(cursor *c)
{
    if (c->i == c->n)
        return fail(c, "premature end of input");
    unsigned char e = c->t[c->i++];
    if (e != 'u')
        return strchr("\"\\/bfnrt", e) != NULL && e != '\0' ? true
                                                           : fail(c, "invalid escape");
    unsigned v, lo;
    if (!hex4(c, &v))
        return false;
    if (v == 0)
        return fail(c, "\\u0000 is not allowed");
    if (v >= 0xDC00 && v <= 0xDFFF)
        return fail(c, "invalid Unicode escape");
    if (v < 0xD800 || v > 0xDBFF)
        return true;
    if (c->n - c->i < 2 || c->t[c->i] != '\\' || c->t[c->i + 1] != 'u')
        return fail(c, "invalid Unicode escape");
    c->i += 2;
    if (!hex4(c, &lo))
        return false;
    return lo >= 0xDC00 && lo <= 0xDFFF ? true : fail(c, "invalid Unicode escape");
}

/* One UTF-8 sequence of 2 to 4 bytes starting at t[i] (>= 0x80): RFC 3629, as jansson checks
 * (no overlong forms, no surrogates, nothing above U+10FFFF). */
static bool utf8(cursor *c)
{
    unsigned char b = c->t[c->i];
    size_t more;
    unsigned char lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (b >= 0xC2 && b <= 0xDF) {
        more = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
        more = 2;
        if (b == 0xE0)
            lo = 0xA0;
        else if (b == 0xED)
            hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        more = 3;
        if (b == 0xF0)
            lo = 0x90;
        else if (b == 0xF4)
            hi = 0x8F;
    } else {
        return fail(c, "invalid UTF-8");
    }
    if (c->n - c->i <= more)
        return fail(c, "premature end of input");
    for (size_t k = 1; k <= more; k++) {
        unsigned char x = c->t[c->i + k];
        if (k == 1 ? x < lo || x > hi : x < 0x80 || x > 0xBF)
            return fail(c, "invalid UTF-8");
    }
    c->i += more + 1;
    return true;
}

/* A string whose opening quote is at t[i]; i ends past the closing quote. */
static bool string(cursor *c)
{
    c->i++;
    while (c->i < c->n) {
        unsigned char b = c->t[c->i];
        if (b == '"') {
            c->i++;
            return true;
        }
        if (b < 0x20)
            return fail(c, "control character in a string");
        if (b == '\\') {
            c->i++;
            if (!escape(c))
                return false;
        } else if (b >= 0x80) {
            if (!utf8(c))
                return false;
        } else {
            c->i++;
        }
    }
    return fail(c, "premature end of input");
}

/* Digits at t[i]: at least one. */
static bool digits(cursor *c)
{
    size_t b = c->i;
    while (c->i < c->n && is_digit(c->t[c->i]))
        c->i++;
    return c->i > b ? true : fail(c, c->i == c->n ? "premature end of input" : "invalid number");
}

/* jansson reads one byte past a number or a literal and puts it back; a NUL byte put back so
 * is lost (its stream takes NUL for the end of a refill): it skips one NUL there. */
static bool lookahead_nul(cursor *c)
{
    if (c->i < c->n && c->t[c->i] == '\0')
        c->i++;
    return true;
}

/* A number of RFC 8259 at t[i]. */
static bool number(cursor *c)
{
    if (c->t[c->i] == '-')
        c->i++;
    if (c->i < c->n && c->t[c->i] == '0') {
        c->i++;
        if (c->i < c->n && is_digit(c->t[c->i]))
            return fail(c, "invalid number");
    } else if (!digits(c)) {
        return false;
    }
    if (c->i < c->n && c->t[c->i] == '.') {
        c->i++;
        if (!digits(c))
            return false;
    }
    if (c->i < c->n && (c->t[c->i] == 'e' || c->t[c->i] == 'E')) {
        c->i++;
        if (c->i < c->n && (c->t[c->i] == '+' || c->t[c->i] == '-'))
            c->i++;
        if (!digits(c))
            return false;
    }
    return lookahead_nul(c);
}

/* true, false or null at t[i], not followed by more letters. */
static bool literal(cursor *c)
{
    static const char *const words[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(words[k]);
        if (c->n - c->i >= n && memcmp(c->t + c->i, words[k], n) == 0) {
            c->i += n;
            return lookahead_nul(c);
        }
    }
    return fail(c, c->n - c->i < 5 ? "premature end of input" : "invalid token");
}

/* The open containers: bit d set when the container at depth d (from 1) is an object. */
typedef struct stack {
    uint8_t bits[DEPTH_MAX / 8 + 1];
    size_t depth;
} stack;

static bool push(cursor *c, stack *s, bool object)
{
    if (s->depth + 1 > DEPTH_MAX)
        return fail(c, "maximum parsing depth reached");
    s->depth++;
    if (object)
        s->bits[s->depth / 8] |= (uint8_t)(1u << (s->depth % 8));
    else
        s->bits[s->depth / 8] &= (uint8_t)~(1u << (s->depth % 8));
    return true;
}

static bool top_is_object(const stack *s)
{
    return (s->bits[s->depth / 8] >> (s->depth % 8)) & 1u;
}

static void skip_ws(cursor *c)
{
    while (c->i < c->n && is_ws(c->t[c->i]))
        c->i++;
}

/* A scalar value, or the opening of a container (pushed), at t[i]. */
static bool value_start(cursor *c, stack *s, bool *opened)
{
    *opened = false;
    if (c->i == c->n)
        return fail(c, "premature end of input");
    unsigned char b = c->t[c->i];
    if (b == '{' || b == '[') {
        if (!push(c, s, b == '{'))
            return false;
        c->i++;
        *opened = true;
        return true;
    }
    if (s->depth + 1 > DEPTH_MAX)
        return fail(c, "maximum parsing depth reached");
    if (b == '"')
        return string(c);
    if (b == '-' || is_digit(b))
        return number(c);
    if (b == 't' || b == 'f' || b == 'n')
        return literal(c);
    return fail(c, "invalid token");
}

/* A member key and its colon at t[i] (white space skipped before). */
static bool member_key(cursor *c)
{
    skip_ws(c);
    if (c->i == c->n)
        return fail(c, "premature end of input");
    if (c->t[c->i] != '"')
        return fail(c, "string or '}' expected");
    if (!string(c))
        return false;
    skip_ws(c);
    if (c->i == c->n)
        return fail(c, "premature end of input");
    if (c->t[c->i] != ':')
        return fail(c, "':' expected");
    c->i++;
    return true;
}

/* After a value: a comma (then the next key or value) or the closing of containers, until a
 * value is due again (*more) or the outermost container closed. */
static bool after_value(cursor *c, stack *s, bool *more)
{
    *more = false;
    while (s->depth > 0) {
        skip_ws(c);
        if (c->i == c->n)
            return fail(c, "premature end of input");
        unsigned char b = c->t[c->i];
        bool object = top_is_object(s);
        if (b == ',') {
            c->i++;
            if (object && !member_key(c))
                return false;
            *more = true;
            return true;
        }
        if (b != (object ? '}' : ']'))
            return fail(c, object ? "'}' expected" : "']' expected");
        c->i++;
        s->depth--;
    }
    return true;
}

/* Right after an opening bracket: its closing bracket (an empty container), else the first
 * key. *empty when it closed. */
static bool container_start(cursor *c, stack *s, bool *empty)
{
    skip_ws(c);
    bool object = top_is_object(s);
    *empty = c->i < c->n && c->t[c->i] == (object ? '}' : ']');
    if (*empty) {
        c->i++;
        s->depth--;
        return true;
    }
    return object ? member_key(c) : true;
}

static bool check(cursor *c)
{
    stack s = {.depth = 0};
    skip_ws(c);
    if (c->i == c->n || (c->t[c->i] != '{' && c->t[c->i] != '['))
        return fail(c, "'[' or '{' expected");
    for (;;) {
        bool opened, more = true;
        skip_ws(c);
        if (!value_start(c, &s, &opened))
            return false;
        while (opened) {
            bool empty;
            if (!container_start(c, &s, &empty))
                return false;
            if (!empty)
                break; /* a value is due inside it */
            opened = false;
        }
        if (opened)
            continue;
        if (!after_value(c, &s, &more))
            return false;
        if (!more)
            break;
    }
    skip_ws(c);
    return c->i == c->n ? true : fail(c, "end of file expected");
}

int pn_json_check(const char *text, size_t len, sv_error *err)
{
    cursor c = {(const unsigned char *)text, 0, len, NULL};
    if (check(&c))
        return 0;
    return sv_error_set(err, -EINVAL, "%s at byte %zu", c.why, c.i);
}

/* ---------------------------------------------------------------------------------------- */
/* a body with one array apart                                                               */
/* ---------------------------------------------------------------------------------------- */

/* The end of the value at t[i] of a checked text: strings and brackets only. */
static size_t value_end(const unsigned char *t, size_t i, size_t n)
{
    size_t depth = 0;
    while (i < n) {
        unsigned char b = t[i];
        if (b == '"') {
            for (i++; i < n && t[i] != '"'; i++)
                if (t[i] == '\\')
                    i++;
            i++;
            if (depth == 0)
                return i; /* a string alone: a key, or a scalar element */
        } else if (b == '{' || b == '[') {
            depth++;
            i++;
        } else if (b == '}' || b == ']') {
            if (depth == 0)
                return i; /* the container around the scalar closes */
            i++;
            if (--depth == 0)
                return i;
        } else if (depth == 0 && (b == ',' || is_ws(b))) {
            return i;
        } else {
            i++;
        }
    }
    return i;
}

static size_t ws_end(const unsigned char *t, size_t i, size_t n)
{
    while (i < n && is_ws(t[i]))
        i++;
    return i;
}

/* Whether the key string at t[b, e) (quotes included) is @p key, escapes decoded. */
static bool key_is(const unsigned char *t, size_t b, size_t e, const char *key)
{
    size_t k = strlen(key);
    if (memchr(t + b, '\\', e - b) == NULL)
        return e - b == k + 2 && memcmp(t + b + 1, key, k) == 0;
    if (e - b > KEY_DECODE_MAX)
        return false;
    json_t *s = json_loadb((const char *)t + b, e - b, JSON_DECODE_ANY, NULL);
    bool same = json_is_string(s) && json_string_length(s) == k &&
                memcmp(json_string_value(s), key, k) == 0;
    json_decref(s);
    return same;
}

/* In a checked object text, the first member @p key whose value is an array: its brackets. */
static bool find_array(const unsigned char *t, size_t n, const char *key, size_t *open,
                       size_t *close)
{
    size_t i = ws_end(t, 0, n);
    if (i == n || t[i] != '{')
        return false;
    i = ws_end(t, i + 1, n);
    while (i < n && t[i] == '"') {
        size_t kb = i, ke = value_end(t, i, n);
        i = ws_end(t, ke, n) + 1; /* past ':' */
        i = ws_end(t, i, n);
        size_t ve = value_end(t, i, n);
        if (key_is(t, kb, ke, key)) {
            if (t[i] != '[')
                return false;
            *open = i;
            *close = ve - 1;
            return true;
        }
        i = ws_end(t, ve, n);
        if (i == n || t[i] != ',')
            return false;
        i = ws_end(t, i + 1, n);
    }
    return false;
}

/* Elements of the checked array between @p open and @p close. */
static size_t count_elements(const unsigned char *t, size_t open, size_t close)
{
    size_t i = ws_end(t, open + 1, close), n = 0;
    while (i < close) {
        n++;
        i = ws_end(t, value_end(t, i, close), close);
        if (i < close) /* a comma */
            i = ws_end(t, i + 1, close);
    }
    return n;
}

/* jansson's reason without the token it quotes (maybe a secret, #5). */
static int jansson_error(json_error_t *jerr, sv_error *err)
{
    char *near = strstr(jerr->text, " near '");
    if (near != NULL)
        *near = '\0';
    if (json_error_code(jerr) == json_error_out_of_memory)
        return sv_error_set(err, -ENOMEM, "out of memory");
    return sv_error_set(err, -EBADMSG, "%s", jerr->text);
}

/* The text without the array's elements: [0, open] + [close, len). */
static json_t *load_skeleton(const pn_json_body *b, json_error_t *jerr)
{
    size_t head = b->open + 1, tail = b->len - b->close;
    char *s = malloc(head + tail);
    if (s == NULL)
        return NULL;
    memcpy(s, b->text, head);
    memcpy(s + head, b->text + b->close, tail);
    json_t *root = json_loadb(s, head + tail, JSON_REJECT_DUPLICATES, jerr);
    free(s);
    return root;
}

int pn_json_body_load(pn_json_body *b, const char *text, size_t len, const char *key,
                      sv_error *err)
{
    memset(b, 0, sizeof *b);
    sv_error inner = {0};
    if (pn_json_check(text, len, &inner) != 0)
        return sv_error_set(err, -EBADMSG, "%s", inner.msg);
    const unsigned char *t = (const unsigned char *)text;
    json_error_t jerr = {0};
    b->text = text;
    b->len = len;
    if (find_array(t, len, key, &b->open, &b->close)) {
        b->n = count_elements(t, b->open, b->close);
        b->next = ws_end(t, b->open + 1, b->close);
        b->root = load_skeleton(b, &jerr);
        if (b->root == NULL && jerr.text[0] == '\0') {
            memset(b, 0, sizeof *b);
            return sv_error_set(err, -ENOMEM, "out of memory");
        }
    } else {
        b->root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    }
    if (b->root == NULL) {
        memset(b, 0, sizeof *b);
        return jansson_error(&jerr, err);
    }
    return 0;
}

int pn_json_body_next(pn_json_body *b, json_t **out, sv_error *err)
{
    *out = NULL;
    if (b->open == 0 || b->taken == b->n)
        return 1;
    const unsigned char *t = (const unsigned char *)b->text;
    size_t s = b->next, e = value_end(t, s, b->close);
    json_error_t jerr = {0};
    *out = json_loadb(b->text + s, e - s, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (*out == NULL)
        return jerr.text[0] == '\0' ? sv_error_set(err, -ENOMEM, "out of memory")
                                    : jansson_error(&jerr, err);
    b->taken++;
    s = ws_end(t, e, b->close);
    b->next = s < b->close ? ws_end(t, s + 1, b->close) : s; /* past the comma */
    return 0;
}

void pn_json_body_free(pn_json_body *b)
{
    if (b == NULL)
        return;
    json_decref(b->root);
    memset(b, 0, sizeof *b);
}

int pn_json_body_at(const json_t *list, pn_json_body *src, size_t i, const char *what,
                    const json_t **v, json_t **own, sv_error *err)
{
    *own = NULL;
    if (src == NULL || src->open == 0) {
        *v = json_array_get(list, i);
        return 0;
    }
    int rc = pn_json_body_next(src, own, err);
    *v = *own;
    return rc == 1 ? sv_error_set(err, -EINVAL, "%s: fewer users than counted", what) : rc;
}
