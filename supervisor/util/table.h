/*
 * A small open-addressing hash table over a growable array of fixed-size entries, kept in
 * insertion order (the tracker's stats groups and usage accounts). Not thread-safe: the owner
 * holds its own lock. Entries are never removed; sv_table_free() empties the table.
 */
#ifndef SV_UTIL_TABLE_H
#define SV_UTIL_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sv_table {
    char *v;          /**< entries, elem bytes each, in insertion order */
    size_t elem, n, cap;
    uint64_t *hashes; /**< the hash of each entry (for rehashing) */
    uint32_t *slots;  /**< entry index + 1; 0 = empty; n_slots is a power of two */
    size_t n_slots;
} sv_table;

/** Key comparison: true when @p entry has key @p key. */
typedef bool (*sv_table_eq)(const void *entry, const void *key);

/** Make @p t an empty table of @p elem-byte entries (no allocation yet). */
void sv_table_init(sv_table *t, size_t elem);
/** Free the table's memory and leave it empty (entries of the same size). */
void sv_table_free(sv_table *t);
/** Entry @p i (0 <= i < t->n), in insertion order. */
void *sv_table_at(const sv_table *t, size_t i);
/**
 * Find the entry with @p key (its hash @p hash), or append a zeroed one (*added = true; the
 * caller fills its key). The pointer is valid until the next insertion.
 * @return the entry, or NULL on allocation failure (the table is unchanged).
 */
void *sv_table_get(sv_table *t, uint64_t hash, const void *key, sv_table_eq eq, bool *added);

/** Hashes for sv_table keys: FNV-1a over a NUL-terminated string, splitmix64 over an integer. */
uint64_t sv_hash_str(const char *s);
uint64_t sv_hash_u64(uint64_t x);

#endif
