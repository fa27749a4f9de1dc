/*
 * Full trial-decryption scans off the worker loops (scan.c), within one
 * process-wide CPU budget.
 */
#ifndef SV_SCAN_H
#define SV_SCAN_H

#include "supervisor/shared.h"

/* ---- full scans off the worker loop (scan.c) ------------------------------
 * A trial decryption tries SV_SS_GUESSES keys on the loop (the hint, then the most recently
 * matched); the rest of the keyring is scanned on libuv's thread pool, one scan at a time for
 * the process, paced by a CPU budget (SV_SCAN_RATE_NS per second, sv_scan_budget). A scan that
 * would wait beyond SV_SCAN_WAIT_MS, or past SV_SCAN_QUEUE_MAX waiting, is refused: the client
 * is treated as if no key matched (Shadowsocks: drained, a datagram dropped). */
#define SV_SS_GUESSES 16             /**< keys tried on the loop before a scan (~25 us: 50 new
                                          clients at once cost the loop ~1 ms) */
#define SV_SCAN_RATE_NS 500000000ULL /**< scan CPU per second of wall time: half a core */
#define SV_SCAN_BURST_NS 100000000ULL /**< scan CPU credit kept when idle */
#define SV_SCAN_WAIT_MS 5000         /**< longest expected wait of an admitted scan (50
                                          never-seen clients at once at 20 000 users: ~3 s) */
#define SV_SCAN_QUEUE_MAX 64         /**< scans admitted at once, for every worker */

typedef struct sv_scan_job sv_scan_job;

/** The scan's answer, on the worker loop: the user's index, or -1 (none, or not run); @p in
 *  and @p n: the job's copy of the bytes (the owner may use them during the call). */
typedef void (*sv_scan_done_fn)(void *owner, int user, uint8_t *in, size_t n);

/** Set up @p s's scan budget and locks (supervisor start). */
void sv__scan_shared_init(sv_shared *s);
/** Destroy @p s's scan locks (no scan may be pending: every worker has ended). */
void sv__scan_shared_deinit(sv_shared *s);

/**
 * Scan @p n bytes at @p in (copied) over @p h's credential table with @p scan (sv_proto_ops
 * scan, or a Shadowsocks datagram's) off @p w's loop, within the shared budget; @p done gets
 * the answer on @p w's loop, unless sv__scan_cancel() came first. Holds a reference of @p h
 * until then. Counted in ss_scans_queued, and the keys it tries in ss_keys.
 * @return the job, for sv__scan_cancel(); NULL when refused (over the budget or the queue
 *         bound, or memory is short; counted in ss_scans_dropped): @p done is never called.
 */
sv_scan_job *sv__scan_start(sv_worker *w, sv_handler *h,
                            int (*scan)(const void *creds, const uint8_t *in, size_t n,
                                        unsigned *trials),
                            const uint8_t *in, size_t n, sv_scan_done_fn done, void *owner);

/** The owner of @p j is gone (worker loop): its done is never called; a scan not yet run is
 *  skipped and costs nothing. The job frees itself. */
void sv__scan_cancel(sv_scan_job *j);

#endif
