/*
 * Exact replay filter for salts (PROTOCOLS.md §1.4, §2.5): two generations of a hash set,
 * swapped when the current one holds `capacity` entries, so a salt is remembered for at least
 * `capacity` further insertions (fewer only when memory to grow a table ran out). Thread-safe
 * (one mutex, taken once per connection).
 */
#ifndef SV_CRYPTO_REPLAY_H
#define SV_CRYPTO_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sv_replay sv_replay;

/** @return a filter remembering at least @p capacity tokens, or NULL on allocation failure. */
sv_replay *sv_replay_new(size_t capacity);
/** Free a filter. NULL-safe. */
void sv_replay_free(sv_replay *r);

/**
 * Insert @p token (1..32 bytes) unless already present.
 * @return true when it was new (accept), false when it was seen before (a replay).
 */
bool sv_replay_add(sv_replay *r, const uint8_t *token, size_t len);

/**
 * The bytes of @p r's two tables: they grow with the tokens of a generation, from 40 KiB each to
 * 80 bytes per token of `capacity` (memory follows the salts seen). For tests and
 * measurement.
 */
size_t sv_replay_bytes(sv_replay *r);

#endif
