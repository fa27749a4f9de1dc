/*
 * Unit tests of the API's log budget (api/logbudget.c, issue 15): API_LOG_BURST lines per
 * API_LOG_WINDOW_S, the rest counted and reported once the window is over.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "api/api.h"

#define WINDOW_MS ((uint64_t)API_LOG_WINDOW_S * 1000u)

static void a_burst_passes_then_lines_are_counted(void **state)
{
    (void)state;
    api_log_budget b = {0};
    uint64_t dropped = 99;
    for (int i = 0; i < API_LOG_BURST; i++) {
        assert_true(api_log_budget_take(&b, 5000 + (uint64_t)i, &dropped));
        assert_int_equal(dropped, 0);
    }
    for (int i = 0; i < 1000; i++)
        assert_false(api_log_budget_take(&b, 5100, &dropped));
    assert_int_equal(dropped, 0);
    assert_int_equal(api_log_budget_flush(&b, 5000 + WINDOW_MS - 1), 0); /* not over yet */
    assert_int_equal(api_log_budget_flush(&b, 5000 + WINDOW_MS), 1000);
    assert_int_equal(api_log_budget_flush(&b, 5000 + 2 * WINDOW_MS), 0); /* reported once */
    assert_true(api_log_budget_take(&b, 5000 + 2 * WINDOW_MS, &dropped));
    assert_int_equal(dropped, 0);
}

static void the_next_line_reports_what_the_last_window_dropped(void **state)
{
    (void)state;
    api_log_budget b = {0};
    uint64_t dropped;
    for (int i = 0; i < API_LOG_BURST + 3; i++)
        api_log_budget_take(&b, 0, &dropped);
    assert_true(api_log_budget_take(&b, WINDOW_MS + 7, &dropped));
    assert_int_equal(dropped, 3);
    assert_int_equal(api_log_budget_flush(&b, 2 * WINDOW_MS + 7), 0);
}

static void a_clock_read_before_the_window_began_does_not_end_it(void **state)
{
    (void)state;
    api_log_budget b = {0};
    uint64_t dropped;
    for (int i = 0; i < API_LOG_BURST + 1; i++)
        api_log_budget_take(&b, 10000, &dropped);
    assert_int_equal(api_log_budget_flush(&b, 9990), 0);
    assert_false(api_log_budget_take(&b, 9995, &dropped));
    assert_int_equal(api_log_budget_flush(&b, 10000 + WINDOW_MS), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_burst_passes_then_lines_are_counted),
        cmocka_unit_test(the_next_line_reports_what_the_last_window_dropped),
        cmocka_unit_test(a_clock_read_before_the_window_began_does_not_end_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
