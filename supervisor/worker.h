/*
 * A worker of the running supervisor (worker.c; DESIGN.md "Threads and loops", seed 001
 * "actor"): its thread and loop, as the actor starts, posts to and joins it. What the runtime's
 * files share about a worker (messages, sv_shared, the worker's tables, its listeners) is
 * shared.h's. Not part of the public API.
 */
#ifndef SV_WORKER_H
#define SV_WORKER_H

#include "supervisor/shared.h"

/** Start worker @p index (a thread with its own loop). @return 0 or a negative errno. */
int sv_worker_start(sv_worker **out, unsigned index, sv_shared *shared);
/** Post a message (moved to the worker; freed there). Any thread. */
void sv_worker_post(sv_worker *w, sv_msg *m);
/** Wake the worker to act on kill/close flags. Any thread. */
void sv_worker_wake(sv_worker *w);
/** Post SV_MSG_EXIT, join the thread and free the worker. */
void sv_worker_join(sv_worker *w);

#endif
