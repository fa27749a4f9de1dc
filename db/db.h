/*
 * The SQLite store (DESIGN.md "db/"): one file in WAL mode holding the usage outbox and the
 * last good panel state of every node, with versioned migrations (table schema_version).
 *
 * Usage outbox (PANEL.md §4.1 "journal the traffic before resetting it"): deltas taken
 * from the supervisor are added per (node, uid) in one transaction; a row not yet part of a push
 * is "open" and later deltas merge into it. A push claims every pending row of its node as one
 * batch (a new batch id) and reads the total per uid; after a 2xx the batch's rows are deleted.
 * Deltas added after the claim land in a new open row, so deleting the batch never deletes them;
 * a failed batch stays and is claimed again, merged with later deltas, by the next push.
 *
 * Control loop only; every call is a short synchronous transaction on a local file.
 */
#ifndef DB_DB_H
#define DB_DB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "supervisor/supervisor.h"
#include "supervisor/util/err.h"
#include "supervisor/util/usage.h"

#define DB_SCHEMA_VERSION 5       /**< the version the migrations bring a file to */
#define DB_BODY_MAX (256u << 20)  /**< largest stored panel body (= PN_BODY_MAX) */
#define DB_KEY_MAX 256u           /**< bytes of a node key or an ETag */

typedef struct db_store db_store;

/** What one claimed batch holds: the total per uid of every pending row of one node. */
typedef struct db_batch {
    int64_t id;     /**< batch id to pass to db_batch_done(); 0 when the batch is empty */
    sv_usage *items; /**< one entry per uid, sorted by uid; malloc'ed, freed by db_batch_free */
    size_t n;
} db_batch;

/**
 * Open (creating if needed) the store at @p path: WAL journal, synchronous=FULL, then run the
 * migrations up to DB_SCHEMA_VERSION (each in its own transaction; re-running is a no-op).
 * One process per database: an exclusive flock on "<real path>.lock" (symlinks resolved,
 * so every name of one file takes the same lock; created 0600, holding
 * the pid) is taken first and held until db_close(); another process holding it is refused.
 * @param out  receives the store, freed with db_close()
 * @param err  "<path>: <sqlite text>", or "database <path> is in use by another katana (pid N)"
 * @return 0, -ENOMEM, -EIO (open/migration failed), -EPROTO (the file's schema is newer),
 *         -EBUSY (another process holds the lock; -EIO when the lock file cannot be made).
 */
int db_open(const char *path, db_store **out, sv_error *err);

/** Close the store. NULL-safe. */
void db_close(db_store *d);

/** The schema version of the open file (DB_SCHEMA_VERSION after db_open). */
int db_schema_version(db_store *d);

/**
 * Add usage deltas of node @p node in one transaction, each merged into the node's open row for
 * its uid (a new row when there is none). Zero deltas are skipped.
 * @param now_ms  wall clock in ms, kept as the row's age when the row is new
 * @return 0, -EINVAL (key too long), -EIO (nothing was written), -EOVERFLOW (a sum would pass
 *         INT64_MAX; nothing was written).
 */
int db_usage_add(db_store *d, const char *node, const sv_usage *items, size_t n, int64_t now_ms,
                 sv_error *err);

/**
 * Claim every pending row of @p node (open rows and rows of earlier, unfinished batches) as one
 * new batch and read its total per uid.
 * @param out  overwritten; free with db_batch_free(); out->id == 0 and n == 0 when nothing is
 *             pending
 * @return 0, -ENOMEM, -EIO, -EBUSY (the node holds a batch: db_batch_hold(); nothing changed).
 */
int db_batch_claim(db_store *d, const char *node, db_batch *out, sv_error *err);

/**
 * The panel accepted batch @p id: delete exactly its rows (later deltas stay).
 * @return 0 or -EIO.
 */
int db_batch_done(db_store *d, int64_t id, sv_error *err);

/**
 * The panel failed batch @p id of @p node (HTTP 500), and it applies a report entry by entry
 * without a transaction (PN_USAGE_ORDERED, PANEL.md §2.6): an unknown prefix of the batch may be
 * billed. Hold the batch until db_batch_settle(): meanwhile db_batch_claim() of @p node refuses
 * (-EBUSY), so nothing of it is sent again before the settlement says what to send. The hold is
 * stored, so a restart keeps it.
 * @return 0, -EINVAL (key too long), -EIO (also when @p node holds another batch).
 */
int db_batch_hold(db_store *d, const char *node, int64_t id, int64_t now_ms, sv_error *err);

/** The batch @p node holds (db_batch_hold()) in @p id, 0 when none. @return 0 or -EIO. */
int db_batch_held(db_store *d, const char *node, int64_t *id, sv_error *err);

/** What db_batch_settle() did with a held batch. */
typedef struct db_settled {
    int64_t batch;          /**< the batch settled; 0 when nothing was held */
    bool explained;         /**< a user the panel no longer lists explained the failure; when
                                 false nothing moved and the batch is sent again whole */
    size_t n_applied;       /**< users before the first unlisted one: billed by the panel */
    uint64_t applied_bytes; /**< their up+down */
    sv_usage *dropped;      /**< unlisted users with their bytes, sorted by uid; malloc'ed */
    size_t n_dropped;
    size_t n_kept;          /**< users left in the batch for the next push */
} db_settled;

/**
 * Settle the batch @p node holds against the user ids the panel lists now (a list pulled after
 * the failure), in one transaction. A batch is sent in uid order (db_batch_claim) and the
 * panel applies its entries in that order until the first user it no longer has, which fails
 * the request (PANEL.md §2.6), so:
 * - rows of the uids below the batch's first unlisted uid were billed: deleted;
 * - rows of every unlisted uid would fail again: moved to the usage_dropped table (kept, with
 *   the batch id and the time);
 * - every other row stays in the batch: the next claim takes it, merged with later deltas.
 * When every uid of the batch is listed, no user explains the failure: nothing moves and the
 * batch is sent again whole (the at-least-once window). Either way the hold ends.
 * @param listed  the panel's user ids, sorted ascending; @p n_listed may be 0 (NULL allowed)
 * @param out     overwritten; free with db_settled_free(); out->batch is 0 when nothing was held
 * @return 0, -EINVAL (key too long), -ENOMEM, -EIO (nothing changed).
 */
int db_batch_settle(db_store *d, const char *node, const uint64_t *listed, size_t n_listed,
                    int64_t now_ms, db_settled *out, sv_error *err);

/** Free what a settlement result owns and zero it. NULL-safe. */
void db_settled_free(db_settled *s);

/**
 * Node @p from is gone (removed from its Xboard machine): in one transaction, its
 * pending usage becomes @p to's (open rows merged into @p to's open rows, unacknowledged
 * batches kept whole for @p to's next claim, a held batch and dropped rows moved too), and its
 * audit rows and stored panel state are deleted. Usage is billed per user id, so the panel's per-user totals stay exact.
 * @return 0, -EINVAL (key too long), -EIO (nothing changed; also when both hold a batch).
 */
int db_usage_move(db_store *d, const char *from, const char *to, sv_error *err);

/** Free what a batch owns and zero it. NULL-safe. */
void db_batch_free(db_batch *b);

/**
 * Pending bytes (up+down) and the wall time of the oldest pending row of @p node, or of every
 * node when @p node is NULL.
 * @param oldest_ms  receives 0 when nothing is pending
 * @return 0 or -EIO.
 */
int db_usage_pending(db_store *d, const char *node, uint64_t *bytes, int64_t *oldest_ms,
                     sv_error *err);

/**
 * Pending bytes of @p node per uid (every row not yet deleted by db_batch_done(): open rows and
 * claimed batches still waiting for the panel's 2xx), sorted by uid. For the REST API's
 * "unreported".
 * @param out  malloc'ed array (NULL when nothing is pending) for the caller to free()
 * @return 0, -ENOMEM or -EIO.
 */
int db_usage_pending_users(db_store *d, const char *node, sv_usage **out, size_t *n,
                           sv_error *err);

/** The kinds of stored panel bodies. */
enum db_state_kind {
    DB_STATE_CONFIG = 0, /**< the `GET config` body (PANEL.md §1.4) */
    DB_STATE_USERS = 1,  /**< the `GET user` body (PANEL.md §1.5) */
};

/**
 * Store the last good body of one kind for @p node (replacing the previous one).
 * @param etag  the panel's ETag as received, or NULL
 * @param body  the JSON text that parsed and was applied; written into the row in pieces, with
 *              no copy of it in memory; in a transaction of its own unless one is
 *              open
 * @return 0, -EINVAL (key or ETag over DB_KEY_MAX, body over DB_BODY_MAX), -EIO.
 */
int db_state_put(db_store *d, const char *node, enum db_state_kind kind, const char *etag,
                 const char *body, size_t body_len, int64_t now_ms, sv_error *err);

/** One body for db_state_put_pair(). */
typedef struct db_state_body {
    const char *etag; /**< the panel's ETag as received, or NULL */
    const char *body; /**< the JSON text; NULL leaves the stored body of this kind as it is */
    size_t len;
} db_state_body;

/**
 * Store the config and users bodies of @p node in one transaction: the pair that applied
 * together (a panel state is stored only after it applied, so a crash never leaves
 * half of a newer pair). A NULL @p config / @p users, or one whose body is NULL, keeps the stored
 * body of that kind.
 * @return 0, or db_state_put()'s errors (nothing written).
 */
int db_state_put_pair(db_store *d, const char *node, const db_state_body *config,
                      const db_state_body *users, int64_t now_ms, sv_error *err);

/**
 * Read the last good body of one kind for @p node.
 * @param etag  receives a malloc'ed copy or NULL (none stored)
 * @param body  receives a malloc'ed NUL-terminated copy
 * @return 0, -ENOENT (nothing stored), -ENOMEM, -EIO.
 */
int db_state_get(db_store *d, const char *node, enum db_state_kind kind, char **etag,
                 char **body, size_t *body_len, sv_error *err);

/*
 * Audit outbox: one row per (node, uid, rule) hit and not yet taken by the
 * panel, so a pair is reported once per report period however often it is hit, and nothing is
 * lost on a restart. A report claims every row of its node as one batch; after the panel's 2xx
 * the batch is deleted and the next hit of a pair is a new row. A pair already pending (claimed
 * or not) is not added again.
 */

/** One pending audit hit. */
typedef struct db_audit_row {
    uint64_t user;
    int64_t rule;     /**< the panel's rule id */
    int64_t first_ms; /**< wall clock of the first hit of the period */
    bool claimed;     /**< part of a report in flight (or one that failed) */
} db_audit_row;

/** A claimed audit batch. */
typedef struct db_audit_batch {
    int64_t id; /**< for db_audit_done(); 0 when empty */
    db_audit_row *rows; /**< sorted by uid, rule; freed by db_audit_batch_free() */
    size_t n;
} db_audit_batch;

/**
 * Add the hits @p hits (their inbound is ignored: all are @p node's) in one transaction; a pair
 * already pending is left as it is.
 * @return the number of rows added (>= 0), -EINVAL (key too long), -EIO (nothing written).
 */
int db_audit_add(db_store *d, const char *node, const sv_audit_hit *hits, size_t n,
                 sv_error *err);

/**
 * Claim every pending audit row of @p node as one new batch (out->id 0, n 0 when none).
 * @return 0, -ENOMEM, -EIO.
 */
int db_audit_claim(db_store *d, const char *node, db_audit_batch *out, sv_error *err);

/** The panel took audit batch @p id (or the node's panel takes none): delete its rows. */
int db_audit_done(db_store *d, int64_t id, sv_error *err);

/** Free a batch's rows and zero it. NULL-safe. */
void db_audit_batch_free(db_audit_batch *b);

/**
 * Every pending audit row of @p node, sorted by uid, rule (REST API).
 * @param out  malloc'ed (NULL when none) for the caller to free()
 * @return 0, -EINVAL, -ENOMEM, -EIO.
 */
int db_audit_pending(db_store *d, const char *node, db_audit_row **out, size_t *n,
                     sv_error *err);

/*
 * Client IP hints: the supervisor's client IP ->
 * user hints saved at a graceful stop (sv_hints_export) and taken back after the first apply of
 * the next start (sv_hints_import), so that returning clients are not all never-seen after a
 * restart. Bounded by the export: at most SV_IP_HINTS_PER_INBOUND rows per inbound. A crash saves
 * none.
 */

/**
 * Replace the stored hints by @p v (n rows) in one transaction.
 * @param now_ms  wall clock in ms: each row's age_s is counted from it
 * @return 0 or -EIO (the stored hints are left as they were).
 */
int db_hints_save(db_store *d, const sv_ip_hint *v, size_t n, int64_t now_ms, sv_error *err);

#define DB_HINTS_TAKE_MAX (1 << 20) /**< rows db_hints_take() reads at most (the most recent):
                                         a bound whatever the file holds */

/**
 * Read the stored hints and delete them, in one transaction: each row's age grows by the time
 * since it was saved (to @p now_ms); rows as old as SV_IP_HINT_TTL_S are left out, and past
 * DB_HINTS_TAKE_MAX rows the oldest are dropped.
 * @param out  malloc'ed array (NULL when none) for the caller to free()
 * @return 0, -ENOMEM or -EIO (nothing deleted).
 */
int db_hints_take(db_store *d, int64_t now_ms, sv_ip_hint **out, size_t *n, sv_error *err);

#endif
