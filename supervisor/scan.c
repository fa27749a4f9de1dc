/*
 * Full trial-decryption scans off the worker loops (junk sent to a
 * Shadowsocks port of many users; scan.h). A scan is a uv_work_t on
 * its worker's loop: the pool thread waits for the process's one scan slot (scan_run_mu), then
 * for budget credit, scans, and is charged the thread CPU time it measured; the answer comes
 * back on the loop. The job holds a handler reference (the keyring it reads) and a copy of the
 * bytes; its owner (a connection, a datagram) may go at any time: sv__scan_cancel() forgets it,
 * and a job not yet run is then skipped.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "supervisor/plane.h"
#include "supervisor/scan.h"
#include "supervisor/shared.h"

struct sv_scan_job {
    uv_work_t req;
    sv_worker *w;
    sv_handler *h;
    int (*scan)(const void *creds, const uint8_t *in, size_t n, unsigned *trials);
    sv_scan_done_fn done;
    void *owner;             /* NULL once cancelled (loop only) */
    _Atomic bool cancelled;  /* the same, for the pool thread */
    bool ran;
    int user;
    size_t n;
    uint8_t in[];
};

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void sv__scan_shared_init(sv_shared *s)
{
    pthread_mutex_init(&s->scan_mu, NULL);
    pthread_mutex_init(&s->scan_run_mu, NULL);
    sv_scan_budget_init(&s->scan_budget, SV_SCAN_RATE_NS, SV_SCAN_BURST_NS,
                        SV_SCAN_WAIT_MS * 1000000ULL, SV_SCAN_QUEUE_MAX,
                        clock_ns(CLOCK_MONOTONIC));
}

void sv__scan_shared_deinit(sv_shared *s)
{
    pthread_mutex_destroy(&s->scan_mu);
    pthread_mutex_destroy(&s->scan_run_mu);
}

/* Pool thread: wait for the slot and the credit, then scan (unless cancelled meanwhile). The
 * pool's threads run scans only (nothing else in katana queues work): each lowers its own
 * priority once (nice 10, Linux per-thread), so the worker loops preempt a running scan. */
static void scan_work(uv_work_t *req)
{
    static _Thread_local bool niced;
    sv_scan_job *j = req->data;
    sv_shared *s = j->w->shared;
    if (!niced) {
        (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
        niced = true;
    }
    pthread_mutex_lock(&s->scan_run_mu);
    while (!atomic_load(&j->cancelled)) {
        pthread_mutex_lock(&s->scan_mu);
        uint64_t wait = sv_scan_budget_wait(&s->scan_budget, clock_ns(CLOCK_MONOTONIC));
        pthread_mutex_unlock(&s->scan_mu);
        if (wait == 0) {
            unsigned trials = 0;
            uint64_t t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
            int r = j->scan(j->h->creds, j->in, j->n, &trials);
            uint64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0;
            j->user = r >= 0 ? r : -1;
            j->ran = true;
            atomic_fetch_add_explicit(&s->ss_keys, trials, memory_order_relaxed);
            atomic_fetch_add_explicit(&s->ss_scans_run, 1, memory_order_relaxed);
            pthread_mutex_lock(&s->scan_mu);
            sv_scan_budget_charge(&s->scan_budget, cpu, clock_ns(CLOCK_MONOTONIC));
            pthread_mutex_unlock(&s->scan_mu);
            break;
        }
        /* a cancelled job (its client left) is looked at again within 5 ms */
        struct timespec ts = {0, (long)(wait < 5000000 ? wait : 5000000)};
        nanosleep(&ts, NULL);
    }
    if (!j->ran) {
        pthread_mutex_lock(&s->scan_mu);
        sv_scan_budget_leave(&s->scan_budget);
        pthread_mutex_unlock(&s->scan_mu);
    }
    pthread_mutex_unlock(&s->scan_run_mu);
}

/* Worker loop: the answer to its owner, if it is still there. */
static void scan_after(uv_work_t *req, int status)
{
    sv_scan_job *j = req->data;
    (void)status;
    if (j->owner != NULL)
        j->done(j->owner, j->ran ? j->user : -1, j->in, j->n);
    sv_handler_unref(j->h);
    OPENSSL_cleanse(j->in, j->n);
    free(j);
}

sv_scan_job *sv__scan_start(sv_worker *w, sv_handler *h,
                            int (*scan)(const void *creds, const uint8_t *in, size_t n,
                                        unsigned *trials),
                            const uint8_t *in, size_t n, sv_scan_done_fn done, void *owner)
{
    sv_shared *s = w->shared;
    pthread_mutex_lock(&s->scan_mu);
    bool admitted = sv_scan_budget_admit(&s->scan_budget, clock_ns(CLOCK_MONOTONIC));
    pthread_mutex_unlock(&s->scan_mu);
    sv_scan_job *j = admitted ? malloc(sizeof *j + n) : NULL;
    if (j != NULL) {
        memset(j, 0, sizeof *j);
        j->req.data = j;
        j->w = w;
        j->h = h;
        j->scan = scan;
        j->done = done;
        j->owner = owner;
        j->user = -1;
        j->n = n;
        memcpy(j->in, in, n);
        sv_handler_ref(h);
        if (uv_queue_work(&w->loop, &j->req, scan_work, scan_after) == 0) {
            atomic_fetch_add_explicit(&s->ss_scans_queued, 1, memory_order_relaxed);
            return j;
        }
        sv_handler_unref(h);
        free(j);
    }
    if (admitted) {
        pthread_mutex_lock(&s->scan_mu);
        sv_scan_budget_leave(&s->scan_budget);
        pthread_mutex_unlock(&s->scan_mu);
    }
    atomic_fetch_add_explicit(&s->ss_scans_dropped, 1, memory_order_relaxed);
    return NULL;
}

void sv__scan_cancel(sv_scan_job *j)
{
    j->owner = NULL;
    atomic_store(&j->cancelled, true);
}
