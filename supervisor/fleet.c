/* The fleet-wide device limit on Redis (fleet.h). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/adapters/libuv.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "supervisor/fleet.h"
#include "supervisor/util/list.h"
#include "supervisor/util/log.h"

#define MOD "sv.fleet"

/* KEYS[1] the user's set; ARGV: ip, limit, expiry (s). 1 = admitted (recorded), 0 = refused. */
static const char ADMIT_LUA[] =
    "redis.replicate_commands() "
    "local now = tonumber(redis.call('TIME')[1]) "
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) "
    "if redis.call('ZSCORE', KEYS[1], ARGV[1]) or "
    "   redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then "
    "  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1]) "
    "  redis.call('EXPIRE', KEYS[1], 2 * tonumber(ARGV[3])) "
    "  return 1 "
    "end "
    "return 0";

/* KEYS[1] the user's set; ARGV: expiry (s), ip... : every ip counts until now + expiry. */
static const char REFRESH_LUA[] =
    "redis.replicate_commands() "
    "local now = tonumber(redis.call('TIME')[1]) "
    "for i = 2, #ARGV do redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[i]) end "
    "redis.call('EXPIRE', KEYS[1], 2 * tonumber(ARGV[1])) "
    "return 0";

struct sv_fleet {
    uv_loop_t *loop;
    sv_redis_options o;
    sv_tracker *t;
    bool refresher;
    sv_fleet_shared *shared;
    redisAsyncContext *ac; /* NULL while down */
    bool up;               /* connected, AUTH/SELECT answered */
    bool counted_down;     /* counted in shared->down */
    bool closing;
    uv_timer_t retry, deadline, refresh;
    int open_timers;
    unsigned refreshing; /* refresh scripts sent and not answered */
    sv_list waiting; /* sv_fleet_req with a callback, in the order asked */
};

struct sv_fleet_req {
    sv_list link;
    sv_fleet *f;
    sv_fleet_cb cb; /* NULL once answered or cancelled */
    void *ctx;
    uint64_t deadline; /* loop ms */
};

static void fleet_connect(sv_fleet *f);
static void drop(sv_fleet *f, const char *why);

/* The retry timer: reconnect when down; when a connection is still not ready after
 * SV_FLEET_RETRY_MS, drop it (the libuv adapter of hiredis 0.14 ignores a poll error, e.g. a
 * refused connect, so that hiredis would never hear of it). */
static void on_retry(uv_timer_t *t)
{
    sv_fleet *f = t->data;
    if (f->ac != NULL && !f->up)
        drop(f, "not ready in time");
    else
        fleet_connect(f);
}

static void mark_down(sv_fleet *f)
{
    f->up = false;
    if (!f->counted_down) {
        f->counted_down = true;
        if (atomic_fetch_add(&f->shared->down, 1) == 0)
            SV_LOG(SV_LOG_WARN, MOD, "redis %s:%u unreachable: device limits use this node's "
                   "count and the panel's alivelist until it is back", f->o.host, f->o.port);
    }
    if (!f->closing && !uv_is_active((uv_handle_t *)&f->retry))
        uv_timer_start(&f->retry, on_retry, SV_FLEET_RETRY_MS, 0);
}

static void answer(sv_fleet_req *r, sv_fleet_answer a)
{
    if (r->cb == NULL)
        return;
    sv_fleet_cb cb = r->cb;
    r->cb = NULL;
    sv_list_unlink(&r->link);
    cb(r->ctx, a);
}

/* Drop the connection (not from inside a hiredis callback): its pending callbacks run with no
 * reply, then on_disconnect. */
static void drop(sv_fleet *f, const char *why)
{
    redisAsyncContext *ac = f->ac;
    SV_LOG(SV_LOG_DEBUG, MOD, "client %p: dropped (%s)", (void *)f, why);
    f->ac = NULL;
    mark_down(f);
    if (ac != NULL)
        redisAsyncFree(ac);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    sv_fleet *f = ac->data;
    SV_LOG(SV_LOG_DEBUG, MOD, "client %p: connect %s", (void *)f, status == REDIS_OK ? "ok" : "failed");
    if (status != REDIS_OK && f->ac == ac) { /* hiredis frees ac after this returns */
        f->ac = NULL;
        mark_down(f);
    }
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    sv_fleet *f = ac->data;
    SV_LOG(SV_LOG_DEBUG, MOD, "client %p: disconnected (%s)", (void *)f, f->ac == ac ? "current" : "old");
    (void)status;
    if (f->ac == ac) {
        f->ac = NULL;
        mark_down(f);
    }
}

static void refresh_now(sv_fleet *f);

static void on_ready(redisAsyncContext *ac, void *reply, void *priv)
{
    sv_fleet *f = priv;
    const redisReply *r = reply;
    if (f->ac != ac || f->closing)
        return;
    if (r == NULL || r->type == REDIS_REPLY_ERROR) { /* AUTH or SELECT refused, or lost */
        if (r != NULL)
            SV_LOG(SV_LOG_WARN, MOD, "redis %s:%u: %.200s", f->o.host, f->o.port, r->str);
        f->ac = NULL;
        mark_down(f);
        redisAsyncFree(ac); /* deferred by hiredis until this callback returns */
        return;
    }
    if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "PONG") != 0)
        return; /* AUTH / SELECT "OK": PING's answer comes next */
    SV_LOG(SV_LOG_DEBUG, MOD, "client %p: ready", (void *)f);
    f->up = true;
    uv_timer_stop(&f->retry);
    if (f->counted_down) {
        f->counted_down = false;
        if (atomic_fetch_sub(&f->shared->down, 1) == 1)
            SV_LOG(SV_LOG_INFO, MOD, "redis %s:%u reachable: fleet-wide device limits again",
                   f->o.host, f->o.port);
    }
    if (f->refresher)
        refresh_now(f);
}

static void fleet_connect(sv_fleet *f)
{
    if (f->closing || f->ac != NULL)
        return;
    SV_LOG(SV_LOG_DEBUG, MOD, "client %p: connecting", (void *)f);
    redisAsyncContext *ac = redisAsyncConnect(f->o.host, f->o.port);
    if (ac == NULL || ac->err) {
        if (ac != NULL)
            redisAsyncFree(ac);
        mark_down(f);
        return;
    }
    ac->data = f;
    if (redisLibuvAttach(ac, f->loop) != REDIS_OK) {
        redisAsyncFree(ac);
        mark_down(f);
        return;
    }
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    f->ac = ac;
    if (f->o.password[0] != '\0') {
        if (f->o.user[0] != '\0') {
            const char *argv[] = {"AUTH", f->o.user, f->o.password};
            redisAsyncCommandArgv(ac, on_ready, f, 3, argv, NULL);
        } else {
            const char *argv[] = {"AUTH", f->o.password};
            redisAsyncCommandArgv(ac, on_ready, f, 2, argv, NULL);
        }
    }
    if (f->o.db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%u", f->o.db);
        const char *argv[] = {"SELECT", db};
        redisAsyncCommandArgv(ac, on_ready, f, 2, argv, NULL);
    }
    const char *ping[] = {"PING"};
    redisAsyncCommandArgv(ac, on_ready, f, 1, ping, NULL);
    uv_timer_start(&f->retry, on_retry, SV_FLEET_RETRY_MS, 0); /* ready by then, or dropped */
}

/* ---- admission ------------------------------------------------------------------------------ */

static void on_deadline(uv_timer_t *t);

/* The deadline timer fires when the oldest waiting request's time is up. */
static void arm_deadline(sv_fleet *f)
{
    if (sv_list_is_empty(&f->waiting) || f->closing) {
        uv_timer_stop(&f->deadline);
        return;
    }
    sv_fleet_req *head = sv_container_of(f->waiting.next, sv_fleet_req, link);
    uint64_t now = uv_now(f->loop);
    uv_timer_start(&f->deadline, on_deadline, head->deadline > now ? head->deadline - now : 0, 0);
}

static void on_deadline(uv_timer_t *t)
{
    sv_fleet *f = t->data;
    uint64_t now = uv_now(f->loop);
    bool expired = false;
    while (!sv_list_is_empty(&f->waiting)) {
        sv_fleet_req *r = sv_container_of(f->waiting.next, sv_fleet_req, link);
        if (r->deadline > now)
            break;
        answer(r, SV_FLEET_UNKNOWN);
        expired = true;
    }
    if (expired && f->ac != NULL)
        drop(f, "admission timed out"); /* fall back at once for the next ones, reconnect */
    arm_deadline(f);
}

static void on_admit_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    sv_fleet_req *r = priv;
    const redisReply *rep = reply;
    (void)ac;
    sv_fleet_answer a = SV_FLEET_UNKNOWN;
    if (rep != NULL && rep->type == REDIS_REPLY_INTEGER)
        a = rep->integer == 1 ? SV_FLEET_YES : SV_FLEET_NO;
    answer(r, a);
    free(r);
}

static void user_key(const sv_fleet *f, uint64_t user, char *out, size_t cap)
{
    snprintf(out, cap, "%s%" PRIu64, f->o.prefix, user);
}

sv_fleet_req *sv_fleet_ask(sv_fleet *f, uint64_t user, uint32_t limit, const char *ip,
                           sv_fleet_cb cb, void *ctx)
{
    if (!sv_fleet_usable(f))
        return NULL;
    sv_fleet_req *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    char key[SV_REDIS_PREFIX_LEN + 24], lim[16], exp[16];
    user_key(f, user, key, sizeof key);
    snprintf(lim, sizeof lim, "%" PRIu32, limit);
    snprintf(exp, sizeof exp, "%" PRIu32, f->o.expiry_s);
    const char *argv[] = {"EVAL", ADMIT_LUA, "1", key, ip, lim, exp};
    if (redisAsyncCommandArgv(f->ac, on_admit_reply, r, 7, argv, NULL) != REDIS_OK) {
        free(r);
        return NULL;
    }
    r->f = f;
    r->cb = cb;
    r->ctx = ctx;
    r->deadline = uv_now(f->loop) + f->o.timeout_ms;
    bool first = sv_list_is_empty(&f->waiting);
    sv_list_insert_tail(&f->waiting, &r->link);
    if (first)
        arm_deadline(f);
    return r;
}

void sv_fleet_cancel(sv_fleet_req *r)
{
    if (r->cb != NULL) {
        r->cb = NULL;
        sv_list_unlink(&r->link);
    }
}

bool sv_fleet_usable(const sv_fleet *f) { return f != NULL && f->up && f->ac != NULL; }

/* ---- refresh -------------------------------------------------------------------------------- */

static void on_refresh_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    sv_fleet *f = priv;
    (void)ac;
    (void)reply;
    f->refreshing--;
}

static int cmp_user_ip(const void *a, const void *b)
{
    const sv_session_info *x = a, *y = b;
    if (x->user != y->user)
        return x->user < y->user ? -1 : 1;
    return strcmp(x->source, y->source); /* sources hold the bare IP here */
}

/* Re-add the IP of every live session bound to a user: one script per user. */
static void refresh_now(sv_fleet *f)
{
    sv_session_info *ss = NULL;
    long n = sv_tracker_sessions(f->t, &ss);
    size_t k = 0;
    for (long i = 0; i < n; i++)
        if (ss[i].has_user) {
            char ip[64];
            sv_source_ip(ss[i].source, ip);
            ss[k] = ss[i];
            snprintf(ss[k].source, sizeof ss[k].source, "%s", ip);
            k++;
        }
    if (k > 1)
        qsort(ss, k, sizeof *ss, cmp_user_ip);
    const char **argv = k > 0 ? malloc((k + 5) * sizeof *argv) : NULL;
    char exp[16];
    snprintf(exp, sizeof exp, "%" PRIu32, f->o.expiry_s);
    for (size_t i = 0; argv != NULL && i < k && f->ac != NULL;) {
        char key[SV_REDIS_PREFIX_LEN + 24];
        user_key(f, ss[i].user, key, sizeof key);
        size_t argc = 0;
        argv[argc++] = "EVAL";
        argv[argc++] = REFRESH_LUA;
        argv[argc++] = "1";
        argv[argc++] = key;
        argv[argc++] = exp;
        size_t j = i;
        for (; j < k && ss[j].user == ss[i].user; j++)
            if (j == i || strcmp(ss[j].source, ss[j - 1].source) != 0)
                argv[argc++] = ss[j].source;
        if (redisAsyncCommandArgv(f->ac, on_refresh_reply, f, (int)argc, argv, NULL) == REDIS_OK)
            f->refreshing++;
        i = j;
    }
    free(argv);
    free(ss);
}

static void on_refresh(uv_timer_t *t)
{
    sv_fleet *f = t->data;
    if (f->refreshing > 0 && f->ac != NULL) {
        drop(f, "refresh unanswered"); /* a dead connection hiredis missed */
        return;
    }
    if (f->up && f->ac != NULL)
        refresh_now(f);
}

/* ---- lifetime ------------------------------------------------------------------------------- */

int sv_fleet_new(uv_loop_t *loop, const sv_redis_options *o, sv_tracker *t, bool refresher,
                 sv_fleet_shared *shared, sv_fleet **out)
{
    sv_fleet *f = calloc(1, sizeof *f);
    if (f == NULL)
        return -ENOMEM;
    f->loop = loop;
    f->o = *o;
    f->t = t;
    f->refresher = refresher;
    f->shared = shared;
    sv_list_init(&f->waiting);
    uv_timer_t *timers[] = {&f->retry, &f->deadline, &f->refresh};
    for (size_t i = 0; i < 3; i++) {
        uv_timer_init(loop, timers[i]);
        timers[i]->data = f;
        uv_unref((uv_handle_t *)timers[i]);
    }
    f->open_timers = 3;
    if (refresher) {
        uint64_t every = o->expiry_s >= 3 ? o->expiry_s / 3 * 1000ull : 1000;
        uv_timer_start(&f->refresh, on_refresh, every, every);
    }
    fleet_connect(f);
    *out = f;
    return 0;
}

static void on_timer_closed(uv_handle_t *h)
{
    sv_fleet *f = h->data;
    if (--f->open_timers == 0)
        free(f);
}

void sv_fleet_close(sv_fleet *f)
{
    if (f == NULL)
        return;
    f->closing = true;
    while (!sv_list_is_empty(&f->waiting)) {
        sv_fleet_req *r = sv_container_of(f->waiting.next, sv_fleet_req, link);
        sv_fleet_cancel(r);
    }
    redisAsyncContext *ac = f->ac;
    f->ac = NULL;
    if (ac != NULL)
        redisAsyncFree(ac); /* pending replies' callbacks free their requests */
    if (f->counted_down)
        atomic_fetch_sub(&f->shared->down, 1);
    f->counted_down = false;
    uv_close((uv_handle_t *)&f->retry, on_timer_closed);
    uv_close((uv_handle_t *)&f->deadline, on_timer_closed);
    uv_close((uv_handle_t *)&f->refresh, on_timer_closed);
}
