/*
 * The audit hit set (seed 002 "RuleManager::detect" / "drain"): workers note
 * each (inbound, user, rule id) a flow or datagram hit; the control loop takes the set once per
 * flush. A pair is held once however often it is hit. Thread-safe (one mutex, taken only on a
 * hit of an audit rule, never on the ordinary path).
 */
#ifndef SV_TRACK_AUDIT_H
#define SV_TRACK_AUDIT_H

#include <stdbool.h>
#include <stdint.h>

#include "supervisor/supervisor.h"

typedef struct sv_audit sv_audit;

/** A new, empty set. @return it, or NULL on OOM. */
sv_audit *sv_audit_new(void);

/** Free the set. NULL-safe. */
void sv_audit_free(sv_audit *a);

/**
 * Note a hit of rule @p rule by @p user on inbound @p inbound (truncated to SV_TAG_MAX bytes) at
 * wall clock @p now_ms. Any thread.
 * @return true when the pair is new since the last take; false when already held, or dropped
 *         (SV_AUDIT_PENDING_MAX pairs held, or out of memory; counted as dropped).
 */
bool sv_audit_note(sv_audit *a, const char *inbound, uint64_t user, int64_t rule,
                   uint64_t now_ms);

/**
 * Move every held hit to @p out (malloc'ed, sorted by inbound, user, rule; NULL when none) and
 * empty the set. Any thread.
 * @return the count, or -ENOMEM (the set is unchanged).
 */
long sv_audit_take(sv_audit *a, sv_audit_hit **out);

/** New pairs noted and pairs dropped since the set was made. Any thread. */
void sv_audit_stats(sv_audit *a, uint64_t *recorded, uint64_t *dropped);

#endif
