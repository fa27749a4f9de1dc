/*
 * Flow records (flow.c; seed 002), for every flow kind: a record, its registration against a
 * drained outbound version, its close; the wall clock and the address format they use. The
 * connector (connector.h) makes and registers them; their owners close them.
 */
#ifndef SV_FLOW_H
#define SV_FLOW_H

#include "supervisor/shared.h"

/**
 * A new flow record of worker @p worker (its @p owner object) for session @p sess: user, source,
 * destination @p d, the name sniffed from the first client bytes (@p sniffed, NULL = none),
 * @p network, the target "tag@vN", the rule (-1 = default) and plane epoch, started now. The
 * tracker assigns the id at sv_tracker_flow_open(). Free it with free() while unregistered.
 * @return NULL when out of memory.
 */
sv_flow_rec *sv__flow_new(unsigned worker, void *owner, const sv_session_rec *sess, uint64_t user,
                          const sv_dest *d, const char *sniffed, enum sv_network network,
                          const sv_target *t, int rule, uint64_t epoch);

/**
 * Connector step "register" (seed 000 "Guarded", seed 002; reached through
 * sv__connector_opened, connector.h): the one place where a dial completes, for every flow
 * kind. Registers flow @p f, opened
 * on outbound version @p t, with @p tracker (sv_tracker_flow_open; the tracker owns it from
 * now), then checks @p t's closed token, in that order (see sv_target_close). Worker thread.
 * @return true: the flow relays; false: @p t was drained while the flow dialled: the flow is
 *         registered all the same and the caller ends it at once (a sub-flow with its End, a
 *         sub-link dropped); logged here at debug level with SV_DRAINED_TEXT.
 */
bool sv__flow_opened(sv_tracker *tracker, sv_flow_rec *f, const sv_target *t);

/**
 * Flow @p f of worker f->worker ends for reason @p r: counted in @p s's row of that
 * worker (sv_flow_closes) and said at debug level with the flow's id (0 when it never
 * registered: a dial that failed), session, destination and outbound. Call it on that worker's
 * thread, before the record goes to the tracker or is freed.
 */
void sv__flow_closed(sv_shared *s, const sv_flow_rec *f, sv_close_reason r);

/** Format a socket address as "ip:port" ("[v6]:port"). */
void sv__addr_format(const struct sockaddr *sa, char *buf, size_t cap);

/** Milliseconds since the Unix epoch (wall clock, for started_ms). */
uint64_t sv__wall_ms(void);

#endif
