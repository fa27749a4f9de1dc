/*
 * The CPU budget of full trial-decryption scans
 * (the junk part): a token bucket of scan CPU time shared by every worker, and the bound of the
 * scans waiting for it. A scan that would wait beyond the bound is refused (the caller drops a
 * never-seen client); an admitted scan waits until the bucket holds credit, runs, and is charged
 * the CPU time it measured. So scans take at most `rate` CPU per second of wall time, plus one
 * scan and `burst` at a time.
 *
 * Pure bookkeeping: no clock, thread or lock of its own. Times are the caller's, in ns. The
 * caller serialises the calls (the runtime holds a mutex, supervisor/scan.c).
 */
#ifndef SV_UTIL_SCANBUDGET_H
#define SV_UTIL_SCANBUDGET_H

#include <stdbool.h>
#include <stdint.h>

typedef struct sv_scan_budget {
    uint64_t rate;     /**< CPU ns credited per second of wall time (500 000 000: half a core) */
    uint64_t burst;    /**< most credit kept, ns */
    uint64_t wait_max; /**< longest a new scan may expect to wait for credit, ns */
    unsigned queue_max; /**< most scans admitted and not yet charged or left */
    int64_t credit;    /**< ns; negative: the debt of the last scans */
    uint64_t last;     /**< caller's time of the last refill, ns */
    uint64_t cost;     /**< measured CPU ns of one scan (moving average; 0 = none measured) */
    unsigned queued;   /**< scans admitted and not yet charged or left */
} sv_scan_budget;

/**
 * Start @p b full (credit = @p burst) at time @p now_ns.
 * @param rate_ns     CPU ns credited per second of wall time (> 0)
 * @param burst_ns    most credit kept
 * @param wait_max_ns a scan whose expected wait (the queue ahead times the measured cost, less
 *                    the credit, over the rate) exceeds this is refused
 * @param queue_max   most scans admitted at once (waiting or running)
 */
void sv_scan_budget_init(sv_scan_budget *b, uint64_t rate_ns, uint64_t burst_ns,
                         uint64_t wait_max_ns, unsigned queue_max, uint64_t now_ns);

/**
 * Admit a new scan at @p now_ns: refused when queue_max scans are admitted already or when its
 * expected wait exceeds wait_max. An admitted scan ends with sv_scan_budget_charge() (it ran)
 * or sv_scan_budget_leave() (it was withdrawn before running).
 * @return true when admitted.
 */
bool sv_scan_budget_admit(sv_scan_budget *b, uint64_t now_ns);

/**
 * How long an admitted scan must still wait at @p now_ns before it may run: 0 when the bucket
 * holds credit (credit > 0, or == burst), else the ns until the debt is paid. Refills first.
 */
uint64_t sv_scan_budget_wait(sv_scan_budget *b, uint64_t now_ns);

/** An admitted scan ran and used @p cpu_ns of CPU: take it from the credit, and learn the cost. */
void sv_scan_budget_charge(sv_scan_budget *b, uint64_t cpu_ns, uint64_t now_ns);

/** An admitted scan was withdrawn before it ran (its client left): it costs nothing. */
void sv_scan_budget_leave(sv_scan_budget *b);

#endif
