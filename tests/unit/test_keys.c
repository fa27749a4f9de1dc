/* pn_keys_check (panel/keys.h): strict checks refuse the first unknown key with its path and
 * the nearest known key; reporting checks hand every unknown key to the callback; comments
 * and non-objects pass. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <jansson.h>

#include "panel/keys.h"

static const char *const reality[] = {"server_name", "server_port", "private_key", "short_id",
                                      NULL};

static json_t *load(const char *text)
{
    json_t *j = json_loads(text, 0, NULL);
    assert_non_null(j);
    return j;
}

static void strict_names_the_path_and_the_nearest_key(void **state)
{
    (void)state;
    sv_error err = {0};
    json_t *j = load("{\"server_name\":\"a\",\"shortid\":\"ab\",\"privateKey\":\"k\"}");
    assert_int_equal(pn_keys_check(j, "nodes[0].tls_settings", reality, true, NULL, NULL, &err),
                     -EINVAL);
    assert_string_equal(err.msg,
                        "nodes[0].tls_settings.shortid: unknown key (did you mean \"short_id\"?)");
    json_decref(j);

    j = load("{\"privateKey\":\"k\"}");
    assert_int_equal(pn_keys_check(j, "tls_settings", reality, true, NULL, NULL, &err), -EINVAL);
    assert_string_equal(err.msg,
                        "tls_settings.privateKey: unknown key (did you mean \"private_key\"?)");
    json_decref(j);

    /* at the top (prefix ""), and a key near none: no parenthesis */
    j = load("{\"server_name\":\"a\",\"completely_else\":1}");
    assert_int_equal(pn_keys_check(j, "", reality, true, NULL, NULL, &err), -EINVAL);
    assert_string_equal(err.msg, "completely_else: unknown key");
    json_decref(j);
}

static void known_keys_comments_and_non_objects_pass(void **state)
{
    (void)state;
    sv_error err = {0};
    json_t *j = load("{\"server_name\":\"a\",\"short_id\":\"\",\"_comment\":\"REALITY\"}");
    assert_int_equal(pn_keys_check(j, "tls_settings", reality, true, NULL, NULL, &err), 0);
    json_decref(j);
    j = load("[1,2]");
    assert_int_equal(pn_keys_check(j, "tls_settings", reality, true, NULL, NULL, &err), 0);
    json_decref(j);
    assert_true(pn_key_is_comment("_note"));
    assert_false(pn_key_is_comment("note_"));
}

typedef struct seen {
    char lines[256];
    int n;
} seen;

static void collect(void *arg, const char *path, const char *closest)
{
    seen *s = arg;
    size_t used = strlen(s->lines);
    snprintf(s->lines + used, sizeof s->lines - used, "%s=%s;", path,
             closest != NULL ? closest : "-");
    s->n++;
}

static void reporting_hands_every_unknown_key_over(void **state)
{
    (void)state;
    sv_error err = {0};
    seen s = {.n = 0};
    json_t *j = load("{\"shortid\":\"ab\",\"server_port\":443,\"new_field\":true,\"_x\":1}");
    assert_int_equal(pn_keys_check(j, "tls_settings", reality, false, collect, &s, &err), 0);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.lines, "tls_settings.shortid=short_id;tls_settings.new_field=-;");
    /* no callback: nothing reported, nothing refused */
    assert_int_equal(pn_keys_check(j, "tls_settings", reality, false, NULL, NULL, &err), 0);
    json_decref(j);
}

static void paths_are_joined_and_bounded(void **state)
{
    (void)state;
    char buf[PN_KEY_PATH_MAX];
    pn_key_path(buf, sizeof buf, "", "server_port");
    assert_string_equal(buf, "server_port");
    pn_key_path(buf, sizeof buf, "routes[0]", "match");
    assert_string_equal(buf, "routes[0].match");
    char small[8];
    pn_key_path(small, sizeof small, "tls_settings", "short_id");
    assert_string_equal(small, "tls_set");
    char longkey[100];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    pn_key_path(buf, sizeof buf, "p", longkey);
    assert_int_equal(strlen(buf), 2 + 64); /* "p." and the key's first 64 bytes */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(strict_names_the_path_and_the_nearest_key),
        cmocka_unit_test(known_keys_comments_and_non_objects_pass),
        cmocka_unit_test(reporting_hands_every_unknown_key_over),
        cmocka_unit_test(paths_are_joined_and_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
