/*
 * Flow records (flow.h; seed 002), for every flow kind: a flow's record from open to close, its
 * close reason, the wall clock and address format they use.
 */
#include "config.h"

#include <stdio.h>
#include <sys/time.h>

#include <uv.h>

#include "supervisor/flow.h"
#include "supervisor/shared.h"
#include "supervisor/util/log.h"

uint64_t sv__wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (uint64_t)tv.tv_sec * 1000u + (uint64_t)tv.tv_usec / 1000u;
}

void sv__addr_format(const struct sockaddr *sa, char *buf, size_t cap)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        uv_ip4_name(a, ip, sizeof ip);
        snprintf(buf, cap, "%s:%u", ip, ntohs(a->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        uv_ip6_name(a, ip, sizeof ip);
        snprintf(buf, cap, "[%s]:%u", ip, ntohs(a->sin6_port));
    } else {
        snprintf(buf, cap, "?");
    }
}

sv_flow_rec *sv__flow_new(unsigned worker, void *owner, const sv_session_rec *sess, uint64_t user,
                          const sv_dest *d, const char *sniffed, enum sv_network network,
                          const sv_target *t, int rule, uint64_t epoch)
{
    char dest[sizeof ((sv_flow_info *)0)->destination];
    sv_dest_format(d, dest, sizeof dest);
    sv_flow_rec *f = sv_flow_rec_new(sess->info.inbound, sess->info.source, dest, sniffed, t->id);
    if (f == NULL)
        return NULL;
    sv_flow_desc *fi = &f->info;
    f->worker = worker;
    f->owner = owner;
    fi->session = sess->info.id;
    fi->has_user = true;
    fi->user = user;
    fi->network = network;
    fi->rule = rule;
    fi->epoch = epoch;
    fi->started_ms = sv__wall_ms();
    return f;
}

bool sv__flow_opened(sv_tracker *tracker, sv_flow_rec *f, const sv_target *t)
{
    sv_tracker_flow_open(tracker, f);
    /* seq_cst after the registry's lock: a drain stores the token before it walks the registry */
    if (!atomic_load(&t->closed))
        return true;
    SV_LOG(SV_LOG_DEBUG, "sv.conn", "session %llu: flow %llu to %s on %s: " SV_DRAINED_TEXT,
           (unsigned long long)f->info.session, (unsigned long long)f->info.id,
           f->info.destination, f->info.outbound);
    return false;
}

const char *sv_close_reason_name(sv_close_reason r)
{
    static const char *const names[SV_CLOSE_REASONS] = {
        [SV_CLOSE_END] = "end",       [SV_CLOSE_ERROR] = "error",   [SV_CLOSE_KILL] = "kill",
        [SV_CLOSE_SESSION] = "session", [SV_CLOSE_REVOKE] = "revoke", [SV_CLOSE_IDLE] = "idle",
        [SV_CLOSE_LIMIT] = "limit",   [SV_CLOSE_SHUTDOWN] = "shutdown",
    };
    return (unsigned)r < SV_CLOSE_REASONS ? names[r] : "unknown";
}

const char *sv_refusal_name(sv_refusal r)
{
    static const char *const names[SV_REFUSALS] = {
        [SV_REFUSE_PRIVATE] = "private",
        [SV_REFUSE_BLOCKED] = "blocked",
        [SV_REFUSE_NO_MEMORY] = "no_memory",
    };
    return (unsigned)r < SV_REFUSALS ? names[r] : "unknown";
}

void sv__flow_closed(sv_shared *s, const sv_flow_rec *f, sv_close_reason r)
{
    if ((unsigned)r >= SV_CLOSE_REASONS)
        r = SV_CLOSE_ERROR;
    _Atomic uint64_t *n = &s->closes[f->worker % SV_WORKERS_MAX].n[r];
    atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    SV_LOG(SV_LOG_DEBUG, "sv.flow", "flow %llu of session %llu to %s via %s closed: %s",
           (unsigned long long)f->info.id, (unsigned long long)f->info.session,
           f->info.destination, f->info.outbound, sv_close_reason_name(r));
}
