/*
 * Benchmark (issue 13 "Scale benchmarks", `make bench`): one sampler tick (sv_tracker_tick,
 * supervisor/track/sampler.c and ledger.c) over synthetic flows, goal <= 10 ms at 100 000 flows
 * and 50 000 users. The tracker is the daemon's own code; only the records are made up:
 * FLOWS flows over 4 workers, each in a session of its own bound to one of USERS users (user
 * i % USERS + 1), on 4 inbounds and 3 outbound tags. Between ticks, outside the timed part,
 * every flow and session moves bytes and 1% of the flows (and their sessions) close and are
 * replaced by new ones, so each tick also drains a closed queue. Prints the median and the
 * slowest tick of TICKS, in wall time and in this thread's CPU time (a shared host's load
 * changes the second less).
 *
 * Usage: sampler_tick [FLOWS [USERS [TICKS]]]   (defaults 100000 50000 30)
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "supervisor/track/tracker.h"

#define WORKERS 4u

static double now_ms(clockid_t clock)
{
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void no_wake(void *ctx, unsigned worker)
{
    (void)ctx;
    (void)worker;
}

typedef struct slot {
    sv_flow_rec *flow;
    sv_session_rec *session;
} slot;

/* Open flow (and session) number @p n in @p s. Exits on allocation failure. */
static void open_slot(sv_tracker *t, slot *s, unsigned long n, unsigned long users)
{
    static const char *const inbounds[] = {"node-ss", "node-vless", "node-trojan", "node-vmess"};
    static const char *const outbounds[] = {"direct@v1", "direct@v2", "block@v1"};
    char source[64], destination[64];
    snprintf(source, sizeof source, "127.%lu.%lu.%lu:%lu", n >> 16 & 255, n >> 8 & 255, n & 255,
             10000 + n % 50000);
    snprintf(destination, sizeof destination, "site%lu.example.test:443", n);
    sv_session_rec *ses = sv_session_rec_new(inbounds[n % 4], source);
    sv_flow_rec *f = sv_flow_rec_new(inbounds[n % 4], source, destination, "", outbounds[n % 3]);
    if (ses == NULL || f == NULL) {
        fprintf(stderr, "sampler_tick: out of memory\n");
        exit(1);
    }
    uint64_t user = n % users + 1;
    unsigned worker = (unsigned)(n % WORKERS);
    ses->worker = worker;
    ses->info.started_ms = 1700000000000ull + n;
    sv_tracker_session_open(t, ses);
    sv_tracker_session_bind_user(t, ses, user);
    sv_meter_add(&ses->wire->up, 300); /* its handshake: the next tick charges its user */
    f->worker = worker;
    f->info.session = ses->info.id;
    f->info.has_user = true;
    f->info.user = user;
    f->info.rule = -1;
    f->info.started_ms = ses->info.started_ms;
    sv_tracker_flow_open(t, f);
    s->flow = f;
    s->session = ses;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    unsigned long flows = argc > 1 ? strtoul(argv[1], NULL, 10) : 100000;
    unsigned long users = argc > 2 ? strtoul(argv[2], NULL, 10) : 50000;
    unsigned long ticks = argc > 3 ? strtoul(argv[3], NULL, 10) : 30;
    if (flows == 0 || users == 0 || ticks == 0) {
        fprintf(stderr, "usage: sampler_tick [FLOWS [USERS [TICKS]]]\n");
        return 2;
    }
    sv_tracker *t = sv_tracker_new(WORKERS, no_wake, NULL);
    slot *slots = calloc(flows, sizeof *slots);
    double *wall = calloc(ticks, sizeof *wall), *cpu = calloc(ticks, sizeof *cpu);
    if (t == NULL || slots == NULL || wall == NULL || cpu == NULL) {
        fprintf(stderr, "sampler_tick: out of memory\n");
        return 1;
    }
    unsigned long next = 0;
    for (unsigned long i = 0; i < flows; i++)
        open_slot(t, &slots[i], next++, users);
    sv_tracker_tick(t, 1000000000u); /* the first tick creates every group and account */
    unsigned long churn = flows / 100, victim = 0;
    for (unsigned long k = 0; k < ticks; k++) {
        for (unsigned long i = 0; i < flows; i++) { /* the workers' traffic of one second */
            sv_meter_add(&slots[i].flow->bytes->up, 1000 + i % 7);
            sv_meter_add(&slots[i].flow->bytes->down, 20000 + i % 13);
            sv_meter_add(&slots[i].session->wire->up, 1100);
            sv_meter_add(&slots[i].session->wire->down, 21000);
        }
        for (unsigned long i = 0; i < churn; i++, victim = (victim + 97) % flows) {
            sv_tracker_flow_close(t, slots[victim].flow);
            sv_tracker_session_close(t, slots[victim].session);
            open_slot(t, &slots[victim], next++, users);
        }
        double w0 = now_ms(CLOCK_MONOTONIC), c0 = now_ms(CLOCK_THREAD_CPUTIME_ID);
        sv_tracker_tick(t, 1000000000u);
        cpu[k] = now_ms(CLOCK_THREAD_CPUTIME_ID) - c0;
        wall[k] = now_ms(CLOCK_MONOTONIC) - w0;
    }
    sv_stats st;
    if (sv_tracker_stats(t, &st) == 0) {
        printf("last tick: %zu users active, %u flows live, %.1f MB/s down in total\n",
               st.n_users, st.total.flows, (double)st.total.down_rate / 1e6);
        sv_stats_free(&st);
    }
    qsort(wall, ticks, sizeof *wall, cmp_double);
    qsort(cpu, ticks, sizeof *cpu, cmp_double);
    printf("sampler tick, %lu flows, %lu users (1%% of the flows replaced per tick), %lu ticks: "
           "median %.2f ms (CPU %.2f ms), slowest %.2f ms (CPU %.2f ms)   goal: <= 10 ms at "
           "100 000 flows and 50 000 users (%s)\n",
           flows, users, ticks, wall[ticks / 2], cpu[ticks / 2], wall[ticks - 1], cpu[ticks - 1],
           flows < 100000 || users < 50000 ? "smaller than the goal's size"
           : cpu[ticks / 2] <= 10.0        ? "met on CPU time"
                                           : "missed on CPU time");
    sv_tracker_free(t); /* frees every record it holds */
    free(slots);
    free(wall);
    free(cpu);
    return 0;
}
