/*
 * Whether a worker accepts one more connection, and which connections not yet authenticated
 * make room (admission.c).
 */
#ifndef SV_ADMISSION_H
#define SV_ADMISSION_H

#include "supervisor/shared.h"

/**
 * Whether @p w may accept one more connection now: the process is
 * under its budget (sv_shared.conn_cap) and its descriptors fit (sv_fds_fit), or a connection
 * not authenticated yet can make room (this worker's or another's), with at most
 * SV_ACCEPT_BATCH connections over the budget while those close. When not, a reason for the
 * log goes to @p why (@p why_len bytes; NULL: none). Worker thread.
 */
bool sv__admit_room(const sv_worker *w, char *why, size_t why_len);
/**
 * A connection was just accepted on @p w (sv__conn_open succeeded).
 * Past the worker's pre-auth share, or over the budget, the oldest pre-auth connection of @p w
 * is closed (never the new one), else another worker is asked to close its oldest; then
 * sv__admit_tick(). Worker thread.
 */
void sv__admit_accepted(sv_worker *w);
/** Accept on @p w failed for lack of descriptors: close up to
 *  SV_EVICT_ON_EMFILE of its oldest pre-auth connections. @return true when it closed any
 *  (accept again on the next loop turn, once they are closed), false: pause. */
bool sv__admit_out_of_fds(sv_worker *w);
/** Close as many of @p w's oldest pre-auth connections as other workers
 *  asked for (sv_shared.evict_asked). Worker thread, on its wakeup. */
void sv__admit_asked(sv_worker *w);
/** Under pressure, close @p w's pre-auth connections older than
 *  SV_PREAUTH_PRESSED_MS. Worker thread (accepts, retry ticks, sweeps). */
void sv__admit_tick(sv_worker *w);

#endif
