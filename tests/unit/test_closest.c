/* sv_closest (supervisor/util/closest.h): typos find their word, far words find nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "supervisor/util/closest.h"

static const char *const keys[] = {"short_id", "private_key", "server_name", "dest", NULL,
                                   "node_type", "users_file"};
static const char *const cmds[] = {"run", "check", "import", "version", "keygen", "status"};
#define N(a) (sizeof(a) / sizeof((a)[0]))

static void typos_find_their_word(void **state)
{
    (void)state;
    assert_string_equal(sv_closest("shortid", keys, N(keys)), "short_id");
    assert_string_equal(sv_closest("privateKey", keys, N(keys)), "private_key");
    assert_string_equal(sv_closest("servername", keys, N(keys)), "server_name");
    assert_string_equal(sv_closest("nodetype", keys, N(keys)), "node_type");
    assert_string_equal(sv_closest("user-file", keys, N(keys)), "users_file");
    assert_string_equal(sv_closest("chek", cmds, N(cmds)), "check");
    assert_string_equal(sv_closest("ipmort", cmds, N(cmds)), "import");
    assert_string_equal(sv_closest("rnu", cmds, N(cmds)), "run");
    assert_string_equal(sv_closest("CHECK", cmds, N(cmds)), "check");
}

static void far_words_find_nothing(void **state)
{
    (void)state;
    assert_null(sv_closest("password", keys, N(keys)));
    assert_null(sv_closest("x", cmds, N(cmds)));
    assert_null(sv_closest("", cmds, N(cmds)));
    assert_null(sv_closest(NULL, cmds, N(cmds)));
    assert_null(sv_closest("destination_override", keys, N(keys)));
    char long_word[SV_CLOSEST_MAX + 2];
    for (size_t i = 0; i < sizeof long_word - 1; i++)
        long_word[i] = 'a';
    long_word[sizeof long_word - 1] = '\0';
    const char *const longs[] = {long_word};
    assert_null(sv_closest(long_word, longs, 1));
    assert_null(sv_closest("run", cmds, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(typos_find_their_word),
        cmocka_unit_test(far_words_find_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
