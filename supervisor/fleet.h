/*
 * The fleet-wide device limit on Redis (XrayR GlobalDeviceLimitConfig, soga
 * redis_enable). One client per worker, on the worker's loop (hiredis async with its libuv
 * adapter: no blocking call on a worker; the host is an IP literal, so connecting resolves
 * nothing).
 *
 * Key layout, shared by every node of a fleet: one sorted set per user, key = prefix + the
 * panel's user id in decimal ("katana:devices:42"), member = the client IP as text, score =
 * the Unix time (Redis's own clock, TIME) until which the IP counts. Admission runs one Lua
 * script, atomic on the Redis server: drop expired members; admit when the IP is a member or
 * the set has fewer members than the limit, adding or extending it to now + expiry. Each node
 * re-adds the IPs of its live sessions every expiry / 3 s (and at once after connecting), so an
 * IP counts for at most `expiry` s after its last session anywhere ended. Keys expire 2 × expiry
 * after their last write.
 *
 * Unreachable or slow Redis (no answer within timeout_ms): the asking connection gets
 * SV_FLEET_UNKNOWN (the caller decides with the node's own count plus the panel's alivelist),
 * the client is dropped and reconnects every SV_FLEET_RETRY_MS; while it is down nobody waits
 * for it. One warning when the node loses Redis (the first worker that does), one line when
 * every worker has it back.
 */
#ifndef SV_FLEET_H
#define SV_FLEET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "supervisor/supervisor.h"
#include "supervisor/track/tracker.h"

#define SV_FLEET_RETRY_MS 1000 /**< reconnect period while Redis is unreachable */

typedef struct sv_fleet sv_fleet;
typedef struct sv_fleet_req sv_fleet_req;

typedef enum sv_fleet_answer {
    SV_FLEET_UNKNOWN = -1, /**< no answer in time, or Redis failed: decide locally */
    SV_FLEET_NO = 0,       /**< the user has `limit` other IPs live in the fleet */
    SV_FLEET_YES = 1       /**< admitted; the IP is recorded */
} sv_fleet_answer;

/** An admission's answer, on the fleet's loop; called at most once, never after cancel. */
typedef void (*sv_fleet_cb)(void *ctx, sv_fleet_answer answer);

/** The node-wide state of Redis, shared by every worker's client (for the log lines). */
typedef struct sv_fleet_shared {
    _Atomic unsigned down; /**< workers whose client is down */
} sv_fleet_shared;

/**
 * Start a client on @p loop for @p o (copied; o->enabled must be true). With @p refresher, this
 * client re-adds every live session's IP of @p t (one worker's client does it for the node).
 * @return 0 and *@p out, or -ENOMEM. Connecting happens in the background.
 */
int sv_fleet_new(uv_loop_t *loop, const sv_redis_options *o, sv_tracker *t, bool refresher,
                 sv_fleet_shared *shared, sv_fleet **out);

/** True when the client is connected and ready: an admission may ask it. */
bool sv_fleet_usable(const sv_fleet *f);

/**
 * Ask Redis to admit client IP @p ip of @p user (panel id) under @p limit (> 0). @p cb gets the
 * answer within timeout_ms (SV_FLEET_UNKNOWN at the latest then).
 * @return the pending request (for sv_fleet_cancel), or NULL when it could not be sent (not
 *         usable, out of memory): decide locally.
 */
sv_fleet_req *sv_fleet_ask(sv_fleet *f, uint64_t user, uint32_t limit, const char *ip,
                           sv_fleet_cb cb, void *ctx);

/** The asker is gone: its callback will not be called. @p r must be pending. */
void sv_fleet_cancel(sv_fleet_req *r);

/**
 * Close the client: pending requests are cancelled (their callbacks are not called). The
 * loop must run afterwards until its handles are closed. NULL-safe.
 */
void sv_fleet_close(sv_fleet *f);

#endif
