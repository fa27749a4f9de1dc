/*
 * The one usage type: a user's wire bytes, as the
 * supervisor meters them (sv_take_usage), the outbox stores them (db/) and a panel client
 * reports them (panel/). Plain data, no functions.
 */
#ifndef SV_USAGE_H
#define SV_USAGE_H

#include <stdint.h>

/** Wire bytes of one user. */
typedef struct sv_usage {
    uint64_t user; /**< panel user id (the supervisor's frontend id) */
    uint64_t up;   /**< bytes from the client */
    uint64_t down; /**< bytes to the client */
} sv_usage;

#endif
