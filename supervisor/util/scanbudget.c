/* A token bucket of scan CPU time with a bounded wait (scanbudget.h). */
#include "config.h"

#include "supervisor/util/scanbudget.h"

#define NS_PER_S 1000000000ULL

void sv_scan_budget_init(sv_scan_budget *b, uint64_t rate_ns, uint64_t burst_ns,
                         uint64_t wait_max_ns, unsigned queue_max, uint64_t now_ns)
{
    b->rate = rate_ns > 0 ? rate_ns : 1;
    b->burst = burst_ns;
    b->wait_max = wait_max_ns;
    b->queue_max = queue_max;
    b->credit = (int64_t)burst_ns;
    b->last = now_ns;
    b->cost = 0;
    b->queued = 0;
}

static void refill(sv_scan_budget *b, uint64_t now)
{
    if (now <= b->last)
        return;
    uint64_t dt = now - b->last;
    b->last = now;
    /* dt * rate / 1e9 without overflow for any dt below ~584 years / rate in seconds */
    uint64_t add = dt / NS_PER_S * b->rate + dt % NS_PER_S * b->rate / NS_PER_S;
    uint64_t room = (uint64_t)((int64_t)b->burst - b->credit);
    b->credit = add >= room ? (int64_t)b->burst : b->credit + (int64_t)add;
}

/* ns of wall time to earn @p debt ns of CPU credit */
static uint64_t wait_for(const sv_scan_budget *b, uint64_t debt)
{
    return debt / b->rate * NS_PER_S + debt % b->rate * NS_PER_S / b->rate;
}

bool sv_scan_budget_admit(sv_scan_budget *b, uint64_t now_ns)
{
    if (b->queued >= b->queue_max)
        return false;
    refill(b, now_ns);
    /* the scans ahead and this one, less the credit held, paid at the rate */
    int64_t need = (int64_t)(b->cost * (b->queued + 1)) - b->credit;
    if (need > 0 && wait_for(b, (uint64_t)need) > b->wait_max)
        return false;
    b->queued++;
    return true;
}

uint64_t sv_scan_budget_wait(sv_scan_budget *b, uint64_t now_ns)
{
    refill(b, now_ns);
    if (b->credit > 0 || b->credit >= (int64_t)b->burst)
        return 0;
    return wait_for(b, (uint64_t)(1 - b->credit));
}

void sv_scan_budget_charge(sv_scan_budget *b, uint64_t cpu_ns, uint64_t now_ns)
{
    refill(b, now_ns);
    b->credit -= (int64_t)cpu_ns;
    b->cost = b->cost == 0 ? cpu_ns : (b->cost * 7 + cpu_ns) / 8;
    if (b->queued > 0)
        b->queued--;
}

void sv_scan_budget_leave(sv_scan_budget *b)
{
    if (b->queued > 0)
        b->queued--;
}
