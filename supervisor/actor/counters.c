/*
 * The supervisor's read side: counters, sessions, flows, usage and audit hits, read from the
 * shared state the workers write (sv_shared, the tracker); no actor state is changed.
 */
#include "config.h"


#include "supervisor/actor/actor.h"

long sv_sessions(sv_supervisor *sv, sv_session_info **out) { return sv_tracker_sessions(sv->shared.tracker, out); }
long sv_flows(sv_supervisor *sv, sv_flow_info **out) { return sv_tracker_flows(sv->shared.tracker, out); }
uint64_t sv_epoch(sv_supervisor *sv) { return sv__epoch_now(&sv->shared); }
int sv_set_remote_devices(sv_supervisor *sv, const sv_device_count *v, size_t n)
{
    return sv_tracker_set_remote_devices(sv->shared.tracker, v, n);
}
sv_refused_counts sv_refused_clients(sv_supervisor *sv)
{
    _Atomic uint64_t *r = sv->shared.refused;
    return (sv_refused_counts){
        .drained = atomic_load_explicit(&r[SV_PROBE_DRAIN - 1], memory_order_relaxed),
        .closed = atomic_load_explicit(&r[SV_PROBE_CLOSE - 1], memory_order_relaxed),
        .fallback = atomic_load_explicit(&r[SV_PROBE_FALLBACK - 1], memory_order_relaxed),
    };
}
sv_ss_scan_counts sv_ss_scans(sv_supervisor *sv)
{
    return (sv_ss_scan_counts){
        .queued = atomic_load_explicit(&sv->shared.ss_scans_queued, memory_order_relaxed),
        .run = atomic_load_explicit(&sv->shared.ss_scans_run, memory_order_relaxed),
        .dropped = atomic_load_explicit(&sv->shared.ss_scans_dropped, memory_order_relaxed),
    };
}

sv_vision_direct_counts sv_vision_direct(sv_supervisor *sv)
{
    return (sv_vision_direct_counts){
        .in = atomic_load_explicit(&sv->shared.direct[0], memory_order_relaxed),
        .out = atomic_load_explicit(&sv->shared.direct[1], memory_order_relaxed),
        .spliced = atomic_load_explicit(&sv->shared.splice_conns, memory_order_relaxed),
        .splice_bytes = atomic_load_explicit(&sv->shared.splice_bytes, memory_order_relaxed),
        .splice_no_pipe = atomic_load_explicit(&sv->shared.splice_no_pipe, memory_order_relaxed),
    };
}

sv_turn_counts sv_worker_turns(sv_supervisor *sv)
{
    sv_turn_counts c = {0};
    for (size_t w = 0; w < SV_WORKERS_MAX; w++) {
        const sv_turn_row *row = &sv->shared.turns[w];
        for (size_t i = 0; i <= SV_TURN_BUCKETS; i++)
            c.le[i] += atomic_load_explicit(&row->le[i], memory_order_relaxed);
        c.cpu_ns += atomic_load_explicit(&row->cpu_ns, memory_order_relaxed);
    }
    return c;
}

sv_close_counts sv_flow_closes(sv_supervisor *sv)
{
    sv_close_counts c = {{0}};
    for (size_t w = 0; w < SV_WORKERS_MAX; w++)
        for (size_t r = 0; r < SV_CLOSE_REASONS; r++)
            c.n[r] += atomic_load_explicit(&sv->shared.closes[w].n[r], memory_order_relaxed);
    return c;
}

sv_refusal_counts sv_flow_refusals(sv_supervisor *sv)
{
    sv_refusal_counts c = {{0}};
    for (size_t w = 0; w < SV_WORKERS_MAX; w++)
        for (size_t r = 0; r < SV_REFUSALS; r++)
            c.n[r] += atomic_load_explicit(&sv->shared.refusals[w].n[r], memory_order_relaxed);
    return c;
}

uint64_t sv_control_silence_ms(sv_supervisor *sv, uint64_t *interval_ms)
{
    uint64_t beat = atomic_load_explicit(&sv->beat_ns, memory_order_relaxed), now = uv_hrtime();
    *interval_ms = sv->sample_every_ms;
    return now > beat ? (now - beat) / 1000000u : 0;
}

sv_ss_trial_counts sv_ss_trials(sv_supervisor *sv)
{
    return (sv_ss_trial_counts){
        .lookups = atomic_load_explicit(&sv->shared.ss_lookups, memory_order_relaxed),
        .keys = atomic_load_explicit(&sv->shared.ss_keys, memory_order_relaxed),
    };
}
uint64_t sv_device_refusals(sv_supervisor *sv)
{
    return sv_tracker_device_refusals(sv->shared.tracker);
}
long sv_take_usage(sv_supervisor *sv, sv_usage **out) { return sv_tracker_take_usage(sv->shared.tracker, out); }
long sv_usage_snapshot(sv_supervisor *sv, sv_usage **out) { return sv_tracker_usage_snapshot(sv->shared.tracker, out); }
int sv_kill(sv_supervisor *sv, uint64_t id) { return sv_tracker_kill(sv->shared.tracker, id); }
size_t sv_kill_where(sv_supervisor *sv, const sv_flow_filter *f) { return sv_tracker_kill_where(sv->shared.tracker, f); }
int sv_stats_get(sv_supervisor *sv, sv_stats *out) { return sv_tracker_stats(sv->shared.tracker, out); }
int sv_events_next(sv_supervisor *sv, uint64_t *cursor, sv_event *ev) { return sv_tracker_events_next(sv->shared.tracker, cursor, ev); }
uint64_t sv_events_head(sv_supervisor *sv) { return sv_tracker_events_head(sv->shared.tracker); }

long sv_take_audit(sv_supervisor *sv, sv_audit_hit **out)
{
    return sv_audit_take(sv->shared.audit, out);
}

void sv_audit_counts(sv_supervisor *sv, uint64_t *recorded, uint64_t *dropped)
{
    sv_audit_stats(sv->shared.audit, recorded, dropped);
}
