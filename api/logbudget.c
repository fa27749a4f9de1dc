/*
 * The API's log budget (api/api.h): libmicrohttpd logs once per refused or failed
 * connection and, out of descriptors, once per accept() attempt; the budget keeps that to
 * API_LOG_BURST lines per API_LOG_WINDOW_S plus one line with the count of the rest.
 */
#include <config.h>

#include "api/api.h"

#define WINDOW_MS ((uint64_t)API_LOG_WINDOW_S * 1000u)

/* End the window when it is over; @return what it dropped. */
static uint64_t close_if_over(api_log_budget *b, uint64_t now_ms)
{
    /* now_ms may precede start_ms a little: another thread read the clock earlier */
    if (!b->open || now_ms < b->start_ms || now_ms - b->start_ms < WINDOW_MS)
        return 0;
    uint64_t dropped = b->suppressed;
    b->open = false;
    b->used = 0;
    b->suppressed = 0;
    return dropped;
}

bool api_log_budget_take(api_log_budget *b, uint64_t now_ms, uint64_t *suppressed)
{
    *suppressed = close_if_over(b, now_ms);
    if (!b->open) {
        b->open = true;
        b->start_ms = now_ms;
    }
    if (b->used < API_LOG_BURST) {
        b->used++;
        return true;
    }
    b->suppressed++;
    return false;
}

uint64_t api_log_budget_flush(api_log_budget *b, uint64_t now_ms)
{
    return close_if_over(b, now_ms);
}
