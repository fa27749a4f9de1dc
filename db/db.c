/*
 * The SQLite store (db/db.h): migrations, the usage outbox and the last good panel state.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <sqlite3.h>

#include "db/db.h"
#include "supervisor/util/log.h"

struct db_store {
    sqlite3 *h;
    char *path;
    int lock_fd; /**< the instance lock on PATH.lock, held until db_close */
};

/* One process per database ("Two instances on one port"): an exclusive flock on
 * PATH.lock, which holds the holder's pid. The kernel drops it when the process dies, kill -9
 * included. A separate file, because SQLite's POSIX locks on the database itself are released
 * when any descriptor of the file closes. */
static int lock_instance(db_store *d, sv_error *err)
{
    char lock[PATH_MAX + 8], real[PATH_MAX];
    /* the database's real path, so that a symlink to it takes the same lock */
    if (realpath(d->path, real) == NULL) {
        char dir[PATH_MAX];
        const char *slash = strrchr(d->path, '/');
        const char *base = slash != NULL ? slash + 1 : d->path;
        int dlen = slash == NULL ? 1 : slash == d->path ? 1 : (int)(slash - d->path);
        snprintf(dir, sizeof dir, "%.*s", dlen, slash == NULL ? "." : d->path);
        if (strlen(d->path) >= sizeof real || realpath(dir, real) == NULL ||
            strlen(real) + 1 + strlen(base) >= sizeof real)
            snprintf(real, sizeof real, "%s", d->path); /* open() will say what is wrong */
        else
            snprintf(real + strlen(real), sizeof real - strlen(real), "%s%s",
                     real[strlen(real) - 1] == '/' ? "" : "/", base);
    }
    if ((size_t)snprintf(lock, sizeof lock, "%s.lock", real) >= sizeof lock)
        return sv_error_set(err, -ENAMETOOLONG, "%s: path too long", d->path);
    d->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (d->lock_fd < 0)
        return sv_error_set(err, -EIO, "%s: %s", lock, strerror(errno));
    if (flock(d->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[24] = "";
        ssize_t n = pread(d->lock_fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strspn(pid, "0123456789")] = '\0';
        if (e == EWOULDBLOCK)
            return sv_error_set(err, -EBUSY, "database %s is in use by another katana%s%s%s",
                                d->path, pid[0] != '\0' ? " (pid " : "", pid,
                                pid[0] != '\0' ? ")" : "");
        return sv_error_set(err, -EIO, "%s: %s", lock, strerror(e));
    }
    char pid[24];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(d->lock_fd, 0) != 0 || pwrite(d->lock_fd, pid, (size_t)n, 0) != n)
        SV_LOG(SV_LOG_DEBUG, "db", "%s: pid not written: %s", lock, strerror(errno));
    return 0;
}

/* Migration N brings a file from version N-1 to N; append, never edit a shipped one. */
static const char *const migrations[] = {
    /* 1: the usage outbox, the last good panel state, the batch sequence */
    "CREATE TABLE usage_outbox ("
    " id INTEGER PRIMARY KEY,"
    " node TEXT NOT NULL,"
    " uid INTEGER NOT NULL,"
    " up INTEGER NOT NULL,"
    " down INTEGER NOT NULL,"
    " batch INTEGER NOT NULL DEFAULT 0," /* 0 = open: later deltas merge into it */
    " created_ms INTEGER NOT NULL);"
    "CREATE UNIQUE INDEX usage_open ON usage_outbox(node, uid) WHERE batch = 0;"
    "CREATE INDEX usage_by_batch ON usage_outbox(batch);"
    "CREATE TABLE panel_state ("
    " node TEXT NOT NULL,"
    " kind INTEGER NOT NULL,"
    " etag TEXT,"
    " body BLOB NOT NULL,"
    " saved_ms INTEGER NOT NULL,"
    " PRIMARY KEY (node, kind));"
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
    "INSERT INTO meta (key, value) VALUES ('batch_seq', 0);",
    /* 2: the audit outbox, one row per (node, uid, rule) until the panel took it */
    "CREATE TABLE audit_outbox ("
    " id INTEGER PRIMARY KEY,"
    " node TEXT NOT NULL,"
    " uid INTEGER NOT NULL,"
    " rule INTEGER NOT NULL,"
    " first_ms INTEGER NOT NULL,"
    " batch INTEGER NOT NULL DEFAULT 0);" /* 0 = not yet part of a report */
    "CREATE UNIQUE INDEX audit_pair ON audit_outbox(node, uid, rule);"
    "CREATE INDEX audit_by_batch ON audit_outbox(batch);",
    /* 3: the client IP hints of the last graceful stop, until the next start */
    "CREATE TABLE ip_hints ("
    " inbound TEXT NOT NULL,"
    " ip BLOB NOT NULL," /* 16 bytes: IPv6 or IPv4-mapped */
    " uid INTEGER NOT NULL,"
    " age_s INTEGER NOT NULL," /* at saved_ms */
    " saved_ms INTEGER NOT NULL,"
    " PRIMARY KEY (inbound, ip));",
    /* 4: a batch a non-transactional panel failed (5xx) waits for its settlement;
     * usage of users the panel no longer has is kept as dropped, never deleted */
    "CREATE TABLE usage_hold ("
    " node TEXT PRIMARY KEY,"
    " batch INTEGER NOT NULL,"
    " held_ms INTEGER NOT NULL);"
    "CREATE TABLE usage_dropped ("
    " id INTEGER PRIMARY KEY,"
    " node TEXT NOT NULL,"
    " uid INTEGER NOT NULL,"
    " up INTEGER NOT NULL,"
    " down INTEGER NOT NULL,"
    " batch INTEGER NOT NULL,"
    " dropped_ms INTEGER NOT NULL);",
    /* 5: the body last in a state row, so that a row is inserted with a zeroblob
     * SQLite does not build in memory and the body is written into it in pieces (db_state_put) */
    "CREATE TABLE panel_state_5 ("
    " node TEXT NOT NULL,"
    " kind INTEGER NOT NULL,"
    " etag TEXT,"
    " saved_ms INTEGER NOT NULL,"
    " body BLOB NOT NULL,"
    " PRIMARY KEY (node, kind));"
    "INSERT INTO panel_state_5 (node, kind, etag, saved_ms, body)"
    " SELECT node, kind, etag, saved_ms, body FROM panel_state;"
    "DROP TABLE panel_state;"
    "ALTER TABLE panel_state_5 RENAME TO panel_state;",
};

#define N_MIGRATIONS ((int)(sizeof migrations / sizeof migrations[0]))

_Static_assert(N_MIGRATIONS == DB_SCHEMA_VERSION, "one migration per schema version");

static int fail(db_store *d, sv_error *err, int code, const char *what)
{
    return sv_error_set(err, code, "%s: %s: %s", d->path, what, sqlite3_errmsg(d->h));
}

static int exec(db_store *d, const char *sql, sv_error *err)
{
    char *msg = NULL;
    if (sqlite3_exec(d->h, sql, NULL, NULL, &msg) == SQLITE_OK)
        return 0;
    sv_error_set(err, -EIO, "%s: %s", d->path, msg != NULL ? msg : "sqlite error");
    sqlite3_free(msg);
    return -EIO;
}

static void rollback(db_store *d)
{
    sqlite3_exec(d->h, "ROLLBACK", NULL, NULL, NULL);
}

/* End the transaction begun before: COMMIT when @p rc is 0, else (or when the commit fails)
 * ROLLBACK. @return @p rc, or the commit's error. */
static int tx_end(db_store *d, int rc, sv_error *err)
{
    if (rc == 0)
        rc = exec(d, "COMMIT", err);
    if (rc != 0)
        rollback(d);
    return rc;
}

/* Run one statement that returns at most one integer. */
static int query_int(db_store *d, const char *sql, int64_t *out, sv_error *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(d->h, sql, -1, &st, NULL) != SQLITE_OK)
        return fail(d, err, -EIO, "prepare");
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return fail(d, err, -EIO, "query");
    return 0;
}

int db_schema_version(db_store *d)
{
    int64_t v = 0;
    if (query_int(d, "SELECT version FROM schema_version", &v, NULL) != 0)
        return -EIO;
    return (int)v;
}

static int migrate(db_store *d, sv_error *err)
{
    int rc = exec(d, "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);"
                     "INSERT INTO schema_version (version) SELECT 0"
                     " WHERE NOT EXISTS (SELECT 1 FROM schema_version);", err);
    if (rc != 0)
        return rc;
    for (;;) {
        if ((rc = exec(d, "BEGIN IMMEDIATE", err)) != 0)
            return rc;
        int64_t v = 0;
        if ((rc = query_int(d, "SELECT version FROM schema_version", &v, err)) != 0)
            goto fail;
        if (v > N_MIGRATIONS) {
            rc = sv_error_set(err, -EPROTO, "%s: schema version %lld is newer than this "
                              "katana's %d", d->path, (long long)v, N_MIGRATIONS);
            goto fail;
        }
        if (v == N_MIGRATIONS)
            return exec(d, "COMMIT", err);
        if ((rc = exec(d, migrations[v], err)) != 0)
            goto fail;
        char sql[64];
        snprintf(sql, sizeof sql, "UPDATE schema_version SET version = %lld", (long long)v + 1);
        if ((rc = exec(d, sql, err)) != 0 || (rc = exec(d, "COMMIT", err)) != 0)
            goto fail;
    }
fail:
    rollback(d);
    return rc;
}

int db_open(const char *path, db_store **out, sv_error *err)
{
    *out = NULL;
    db_store *d = calloc(1, sizeof *d);
    if (d == NULL || (d->path = strdup(path)) == NULL) {
        free(d);
        return sv_error_set(err, -ENOMEM, "out of memory");
    }
    d->lock_fd = -1;
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    int rc = lock_instance(d, err);
    if (rc != 0)
        goto out;
    if (sqlite3_open_v2(path, &d->h, flags, NULL) != SQLITE_OK) {
        rc = d->h != NULL ? fail(d, err, -EIO, "open")
                          : sv_error_set(err, -ENOMEM, "%s: out of memory", path);
        goto out;
    }
    sqlite3_busy_timeout(d->h, 1000);
    /* WAL: a crash keeps every committed transaction; FULL also survives a power cut. */
    rc = exec(d, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;",
              err);
    if (rc == 0)
        rc = migrate(d, err);
out:
    if (rc != 0) {
        db_close(d);
        return rc;
    }
    *out = d;
    return 0;
}

void db_close(db_store *d)
{
    if (d == NULL)
        return;
    sqlite3_close(d->h);
    if (d->lock_fd >= 0)
        close(d->lock_fd); /* after SQLite let go of the file */
    free(d->path);
    free(d);
}

static int check_key(const char *node, sv_error *err)
{
    if (node == NULL || strlen(node) > DB_KEY_MAX)
        return sv_error_set(err, -EINVAL, "node key longer than %u bytes", DB_KEY_MAX);
    return 0;
}

/* Merge one delta into the open row of (node, uid). */
static int add_one(db_store *d, sqlite3_stmt *get, sqlite3_stmt *put, const char *node,
                   const sv_usage *u, int64_t now_ms, sv_error *err)
{
    uint64_t up = u->up, down = u->down;
    sqlite3_reset(get);
    sqlite3_bind_text(get, 1, node, -1, SQLITE_STATIC);
    sqlite3_bind_int64(get, 2, (int64_t)u->user);
    int rc = sqlite3_step(get);
    if (rc == SQLITE_ROW) {
        uint64_t old_up = (uint64_t)sqlite3_column_int64(get, 0);
        uint64_t old_down = (uint64_t)sqlite3_column_int64(get, 1);
        if (up > INT64_MAX - old_up || down > INT64_MAX - old_down)
            return sv_error_set(err, -EOVERFLOW, "user %llu: pending bytes overflow",
                                (unsigned long long)u->user);
        up += old_up;
        down += old_down;
    } else if (rc != SQLITE_DONE) {
        return fail(d, err, -EIO, "read open row");
    }
    if (up > INT64_MAX || down > INT64_MAX)
        return sv_error_set(err, -EOVERFLOW, "user %llu: delta too large",
                            (unsigned long long)u->user);
    sqlite3_reset(put);
    sqlite3_bind_text(put, 1, node, -1, SQLITE_STATIC);
    sqlite3_bind_int64(put, 2, (int64_t)u->user);
    sqlite3_bind_int64(put, 3, (int64_t)up);
    sqlite3_bind_int64(put, 4, (int64_t)down);
    sqlite3_bind_int64(put, 5, now_ms);
    if (sqlite3_step(put) != SQLITE_DONE)
        return fail(d, err, -EIO, "write open row");
    return 0;
}

int db_usage_add(db_store *d, const char *node, const sv_usage *items, size_t n, int64_t now_ms,
                 sv_error *err)
{
    int rc = check_key(node, err);
    if (rc != 0 || n == 0)
        return rc;
    sqlite3_stmt *get = NULL, *put = NULL;
    if (sqlite3_prepare_v2(d->h, "SELECT up, down FROM usage_outbox"
                           " WHERE node = ?1 AND uid = ?2 AND batch = 0", -1, &get,
                           NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(d->h, "INSERT INTO usage_outbox (node, uid, up, down, batch,"
                           " created_ms) VALUES (?1, ?2, ?3, ?4, 0, ?5)"
                           " ON CONFLICT (node, uid) WHERE batch = 0"
                           " DO UPDATE SET up = excluded.up, down = excluded.down", -1, &put,
                           NULL) != SQLITE_OK) {
        rc = fail(d, err, -EIO, "prepare");
        goto out;
    }
    if ((rc = exec(d, "BEGIN IMMEDIATE", err)) != 0)
        goto out;
    for (size_t i = 0; i < n && rc == 0; i++)
        if (items[i].up != 0 || items[i].down != 0)
            rc = add_one(d, get, put, node, &items[i], now_ms, err);
    rc = tx_end(d, rc, err);
out:
    sqlite3_finalize(get);
    sqlite3_finalize(put);
    return rc;
}

/* Give every pending row of the node the next batch id. */
static int claim_rows(db_store *d, const char *node, int64_t *id, sv_error *err)
{
    int rc = exec(d, "UPDATE meta SET value = value + 1 WHERE key = 'batch_seq'", err);
    if (rc != 0 || (rc = query_int(d, "SELECT value FROM meta WHERE key = 'batch_seq'", id,
                                   err)) != 0)
        return rc;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(d->h, "UPDATE usage_outbox SET batch = ?1 WHERE node = ?2", -1, &st,
                           NULL) != SQLITE_OK)
        return fail(d, err, -EIO, "prepare");
    sqlite3_bind_int64(st, 1, *id);
    sqlite3_bind_text(st, 2, node, -1, SQLITE_STATIC);
    rc = sqlite3_step(st) == SQLITE_DONE ? 0 : fail(d, err, -EIO, "claim");
    sqlite3_finalize(st);
    return rc;
}

static int read_batch(db_store *d, db_batch *b, sv_error *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(d->h, "SELECT uid, SUM(up), SUM(down) FROM usage_outbox"
                           " WHERE batch = ?1 GROUP BY uid ORDER BY uid", -1, &st,
                           NULL) != SQLITE_OK)
        return fail(d, err, -EIO, "prepare");
    sqlite3_bind_int64(st, 1, b->id);
    size_t cap = 0;
    int rc = 0, s;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (b->n == cap) {
            size_t ncap = cap == 0 ? 64 : 2 * cap;
            sv_usage *p = realloc(b->items, ncap * sizeof *p);
            if (p == NULL) {
                rc = sv_error_set(err, -ENOMEM, "out of memory");
                break;
            }
            b->items = p;
            cap = ncap;
        }
        b->items[b->n++] = (sv_usage){.user = (uint64_t)sqlite3_column_int64(st, 0),
                                      .up = (uint64_t)sqlite3_column_int64(st, 1),
                                      .down = (uint64_t)sqlite3_column_int64(st, 2)};
    }
    if (rc == 0 && s != SQLITE_DONE)
        rc = fail(d, err, -EIO, "read batch"); /* SUM() overflow lands here too */
    sqlite3_finalize(st);
    return rc;
}

/* The batch @p node holds, or 0, in @p id. */
static int held_batch(db_store *d, const char *node, int64_t *id, sv_error *err)
{
    *id = 0;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(d->h, "SELECT batch FROM usage_hold WHERE node = ?1", -1, &st,
                           NULL) != SQLITE_OK)
        return fail(d, err, -EIO, "prepare");
    sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW)
        *id = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return s == SQLITE_ROW || s == SQLITE_DONE ? 0 : fail(d, err, -EIO, "read hold");
}

int db_batch_claim(db_store *d, const char *node, db_batch *out, sv_error *err)
{
    memset(out, 0, sizeof *out);
    int rc = check_key(node, err);
    if (rc != 0 || (rc = exec(d, "BEGIN IMMEDIATE", err)) != 0)
        return rc;
    int64_t held = 0;
    if ((rc = held_batch(d, node, &held, err)) == 0 && held != 0)
        rc = sv_error_set(err, -EBUSY, "batch %lld awaits its settlement", (long long)held);
    if (rc == 0 && (rc = claim_rows(d, node, &out->id, err)) == 0)
        rc = read_batch(d, out, err);
    if ((rc = tx_end(d, rc, err)) != 0) {
        db_batch_free(out);
        return rc;
    }
    if (out->n == 0)
        out->id = 0;
    return 0;
}

int db_batch_done(db_store *d, int64_t id, sv_error *err)
{
    if (id == 0)
        return 0;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(d->h, "DELETE FROM usage_outbox WHERE batch = ?1", -1, &st,
                           NULL) != SQLITE_OK)
        return fail(d, err, -EIO, "prepare");
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : fail(d, err, -EIO, "delete batch");
    sqlite3_finalize(st);
    return rc;
}

int db_batch_hold(db_store *d, const char *node, int64_t id, int64_t now_ms, sv_error *err)
{
    int rc = check_key(node, err);
    sqlite3_stmt *st = NULL;
    if (rc != 0)
        return rc;
    if (sqlite3_prepare_v2(d->h, "INSERT INTO usage_hold (node, batch, held_ms)"
                           " VALUES (?1, ?2, ?3)", -1, &st, NULL) != SQLITE_OK)
        return fail(d, err, -EIO, "prepare");
    sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, id);
    sqlite3_bind_int64(st, 3, now_ms);
    rc = sqlite3_step(st) == SQLITE_DONE ? 0 : fail(d, err, -EIO, "hold batch");
    sqlite3_finalize(st);
    return rc;
}

int db_batch_held(db_store *d, const char *node, int64_t *id, sv_error *err)
{
    int rc = check_key(node, err);
    return rc != 0 ? rc : held_batch(d, node, id, err);
}

/* Run one statement whose only parameter (?1) is @p node. */
static int exec_node(db_store *d, const char *sql, const char *node, sv_error *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(d->h, sql, -1, &st, NULL) != SQLITE_OK)
        return fail(d, err, -EIO, "prepare");
    sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : fail(d, err, -EIO, "write");
    sqlite3_finalize(st);
    return rc;
}

static bool listed_has(const uint64_t *v, size_t n, uint64_t uid)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid] == uid)
            return true;
        if (v[mid] < uid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

/* Run @p sql (?1 batch, ?2 uid, then ?3 node, ?4 up, ?5 down, ?6 time when it has them) for
 * one user of a batch. */
static int batch_user_step(db_store *d, const char *sql, int64_t batch, const sv_usage *u,
                           const char *node, int64_t now_ms, sv_error *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(d->h, sql, -1, &st, NULL) != SQLITE_OK)
        return fail(d, err, -EIO, "prepare");
    sqlite3_bind_int64(st, 1, batch);
    sqlite3_bind_int64(st, 2, (int64_t)u->user);
    if (sqlite3_bind_parameter_count(st) >= 6) {
        sqlite3_bind_text(st, 3, node, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, (int64_t)u->up);
        sqlite3_bind_int64(st, 5, (int64_t)u->down);
        sqlite3_bind_int64(st, 6, now_ms);
    }
    int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : fail(d, err, -EIO, "settle");
    sqlite3_finalize(st);
    return rc;
}

/* The rows of held batch @p b, inside the settlement's transaction (db_batch_settle). */
static int settle_rows(db_store *d, const char *node, const db_batch *b, const uint64_t *listed,
                       size_t n_listed, int64_t now_ms, db_settled *out, sv_error *err)
{
    static const char del[] = "DELETE FROM usage_outbox WHERE batch = ?1 AND uid = ?2";
    static const char drop[] = "INSERT INTO usage_dropped (batch, uid, node, up, down,"
                               " dropped_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
    size_t first = 0;
    while (first < b->n && listed_has(listed, n_listed, b->items[first].user))
        first++;
    out->explained = first < b->n;
    if (!out->explained) {
        out->n_kept = b->n;
        return 0;
    }
    if ((out->dropped = calloc(b->n - first, sizeof *out->dropped)) == NULL)
        return sv_error_set(err, -ENOMEM, "out of memory");
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < b->n; i++) {
        const sv_usage *u = &b->items[i];
        if (i < first) {
            out->n_applied++;
            out->applied_bytes += u->up + u->down;
            rc = batch_user_step(d, del, b->id, u, node, now_ms, err);
        } else if (!listed_has(listed, n_listed, u->user)) {
            out->dropped[out->n_dropped++] = *u;
            if ((rc = batch_user_step(d, drop, b->id, u, node, now_ms, err)) == 0)
                rc = batch_user_step(d, del, b->id, u, node, now_ms, err);
        } else {
            out->n_kept++;
        }
    }
    return rc;
}

int db_batch_settle(db_store *d, const char *node, const uint64_t *listed, size_t n_listed,
                    int64_t now_ms, db_settled *out, sv_error *err)
{
    memset(out, 0, sizeof *out);
    int rc = check_key(node, err);
    if (rc != 0 || (rc = exec(d, "BEGIN IMMEDIATE", err)) != 0)
        return rc;
    db_batch b = {0};
    if ((rc = held_batch(d, node, &b.id, err)) == 0 && b.id != 0 &&
        (rc = read_batch(d, &b, err)) == 0 &&
        (rc = settle_rows(d, node, &b, listed, n_listed, now_ms, out, err)) == 0) {
        out->batch = b.id;
        rc = exec_node(d, "DELETE FROM usage_hold WHERE node = ?1", node, err);
    }
    db_batch_free(&b);
    if ((rc = tx_end(d, rc, err)) != 0)
        db_settled_free(out);
    return rc;
}

void db_settled_free(db_settled *s)
{
    if (s == NULL)
        return;
    free(s->dropped);
    memset(s, 0, sizeof *s);
}

int db_usage_move(db_store *d, const char *from, const char *to, sv_error *err)
{
    static const char *const sql[] = {
        /* a held batch and dropped rows go with the rows (a second hold fails: nothing moves) */
        "UPDATE usage_hold SET node = ?2 WHERE node = ?1",
        "UPDATE usage_dropped SET node = ?2 WHERE node = ?1",
        /* batches that were claimed and not acknowledged: the next claim of @to takes them */
        "UPDATE usage_outbox SET node = ?2 WHERE node = ?1 AND batch <> 0",
        /* open rows merge into @to's open rows */
        "INSERT INTO usage_outbox (node, uid, up, down, batch, created_ms)"
        " SELECT ?2, uid, up, down, 0, created_ms FROM usage_outbox WHERE node = ?1 AND batch = 0"
        " ON CONFLICT (node, uid) WHERE batch = 0"
        " DO UPDATE SET up = up + excluded.up, down = down + excluded.down",
        "DELETE FROM usage_outbox WHERE node = ?1",
        "DELETE FROM audit_outbox WHERE node = ?1",
        "DELETE FROM panel_state WHERE node = ?1",
    };
    int rc = check_key(from, err);
    if (rc == 0)
        rc = check_key(to, err);
    if (rc != 0 || (rc = exec(d, "BEGIN IMMEDIATE", err)) != 0)
        return rc;
    for (size_t i = 0; rc == 0 && i < sizeof sql / sizeof sql[0]; i++) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(d->h, sql[i], -1, &st, NULL) != SQLITE_OK) {
            rc = fail(d, err, -EIO, "prepare move");
            break;
        }
        sqlite3_bind_text(st, 1, from, -1, SQLITE_STATIC);
        if (sqlite3_bind_parameter_count(st) >= 2)
            sqlite3_bind_text(st, 2, to, -1, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = fail(d, err, -EIO, "move usage");
        sqlite3_finalize(st);
    }
    rc = tx_end(d, rc, err);
    return rc;
}

void db_batch_free(db_batch *b)
{
    if (b == NULL)
        return;
    free(b->items);
    memset(b, 0, sizeof *b);
}

int db_usage_pending(db_store *d, const char *node, uint64_t *bytes, int64_t *oldest_ms,
                     sv_error *err)
{
    sqlite3_stmt *st = NULL;
    const char *sql = node != NULL
        ? "SELECT TOTAL(up) + TOTAL(down), MIN(created_ms) FROM usage_outbox WHERE node = ?1"
        : "SELECT TOTAL(up) + TOTAL(down), MIN(created_ms) FROM usage_outbox";
    if (sqlite3_prepare_v2(d->h, sql, -1, &st, NULL) != SQLITE_OK)
        return fail(d, err, -EIO, "prepare");
    if (node != NULL)
        sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
    int rc = 0;
    if (sqlite3_step(st) == SQLITE_ROW) {
        double total = sqlite3_column_double(st, 0); /* TOTAL() never overflows */
        *bytes = total >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)total;
        *oldest_ms = sqlite3_column_type(st, 1) == SQLITE_NULL ? 0 : sqlite3_column_int64(st, 1);
    } else {
        rc = fail(d, err, -EIO, "pending");
    }
    sqlite3_finalize(st);
    return rc;
}

int db_usage_pending_users(db_store *d, const char *node, sv_usage **out, size_t *n,
                           sv_error *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(d->h, "SELECT uid, SUM(up), SUM(down) FROM usage_outbox"
                           " WHERE node = ?1 GROUP BY uid ORDER BY uid", -1, &st,
                           NULL) != SQLITE_OK)
        return fail(d, err, -EIO, "prepare");
    sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
    size_t cap = 0;
    int rc = 0, step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            sv_usage *p = realloc(*out, (cap = cap ? 2 * cap : 16) * sizeof *p);
            if (p == NULL) {
                rc = sv_error_set(err, -ENOMEM, "out of memory");
                break;
            }
            *out = p;
        }
        (*out)[(*n)++] = (sv_usage){(uint64_t)sqlite3_column_int64(st, 0),
                                    (uint64_t)sqlite3_column_int64(st, 1),
                                    (uint64_t)sqlite3_column_int64(st, 2)};
    }
    if (rc == 0 && step != SQLITE_DONE)
        rc = fail(d, err, -EIO, "pending");
    sqlite3_finalize(st);
    if (rc != 0) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

#define BODY_PIECE (1u << 20) /* bytes of a stored body written at a time */

/* Write @p len bytes of @p body into the zeroed body of panel_state row @p rowid, a piece at a
 * time through the page cache. */
static int body_write(db_store *d, sqlite3_int64 rowid, const char *body, size_t len,
                      sv_error *err)
{
    sqlite3_blob *b = NULL;
    if (sqlite3_blob_open(d->h, "main", "panel_state", "body", rowid, 1, &b) != SQLITE_OK) {
        int rc = fail(d, err, -EIO, "store state");
        sqlite3_blob_close(b);
        return rc;
    }
    int rc = 0;
    for (size_t off = 0; rc == 0 && off < len; off += BODY_PIECE) {
        size_t n = len - off < BODY_PIECE ? len - off : BODY_PIECE;
        if (sqlite3_blob_write(b, body + off, (int)n, (int)off) != SQLITE_OK)
            rc = fail(d, err, -EIO, "store state");
    }
    if (sqlite3_blob_close(b) != SQLITE_OK && rc == 0)
        rc = fail(d, err, -EIO, "store state");
    return rc;
}

/* The row with a zeroblob of the body's length, then the body into it (an INSERT of
 * the blob builds the whole record in memory, a copy of a body of up to DB_BODY_MAX). */
static int state_write(db_store *d, const char *node, enum db_state_kind kind,
                       const char *etag, const char *body, size_t body_len, int64_t now_ms,
                       sv_error *err)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(d->h, "INSERT OR REPLACE INTO panel_state (node, kind, etag,"
                           " saved_ms, body) VALUES (?1, ?2, ?3, ?4, zeroblob(?5))", -1, &st,
                           NULL) != SQLITE_OK)
        return fail(d, err, -EIO, "prepare");
    sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, (int)kind);
    if (etag != NULL)
        sqlite3_bind_text(st, 3, etag, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, now_ms);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)body_len);
    int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : fail(d, err, -EIO, "store state");
    sqlite3_finalize(st);
    if (rc == 0 && body_len > 0)
        rc = body_write(d, sqlite3_last_insert_rowid(d->h), body, body_len, err);
    return rc;
}

int db_state_put(db_store *d, const char *node, enum db_state_kind kind, const char *etag,
                 const char *body, size_t body_len, int64_t now_ms, sv_error *err)
{
    int rc = check_key(node, err);
    if (rc != 0)
        return rc;
    if (etag != NULL && strlen(etag) > DB_KEY_MAX)
        return sv_error_set(err, -EINVAL, "ETag longer than %u bytes", DB_KEY_MAX);
    if (body_len > DB_BODY_MAX)
        return sv_error_set(err, -EINVAL, "body larger than %u bytes", DB_BODY_MAX);
    bool own_tx = sqlite3_get_autocommit(d->h) != 0; /* the row and its body in one */
    if (own_tx && (rc = exec(d, "BEGIN IMMEDIATE", err)) != 0)
        return rc;
    rc = state_write(d, node, kind, etag, body, body_len, now_ms, err);
    return own_tx ? tx_end(d, rc, err) : rc;
}

int db_state_put_pair(db_store *d, const char *node, const db_state_body *config,
                      const db_state_body *users, int64_t now_ms, sv_error *err)
{
    const db_state_body *b[2] = {config, users};
    int rc = exec(d, "BEGIN IMMEDIATE", err);
    for (int k = 0; rc == 0 && k < 2; k++)
        if (b[k] != NULL && b[k]->body != NULL)
            rc = db_state_put(d, node, k == 0 ? DB_STATE_CONFIG : DB_STATE_USERS, b[k]->etag,
                              b[k]->body, b[k]->len, now_ms, err);
    rc = tx_end(d, rc, err);
    /* a users body of a large panel went through the page cache (up to its 2 MB): give those
     * pages back, the body is on disk now (memory per user) */
    sqlite3_db_release_memory(d->h);
    return rc;
}

/* Read the body of panel_state row @p rowid into a new buffer of @p n bytes (NUL-terminated), a
 * piece at a time (sqlite3_column_blob() builds the whole blob in memory, a copy
 * beside ours). */
static int body_read(db_store *d, sqlite3_int64 rowid, char **body, size_t *n, sv_error *err)
{
    sqlite3_blob *b = NULL;
    if (sqlite3_blob_open(d->h, "main", "panel_state", "body", rowid, 0, &b) != SQLITE_OK) {
        int rc = fail(d, err, -EIO, "read state");
        sqlite3_blob_close(b);
        return rc;
    }
    *n = (size_t)sqlite3_blob_bytes(b);
    int rc = (*body = malloc(*n + 1)) != NULL ? 0
             : sv_error_set(err, -ENOMEM, "out of memory");
    for (size_t off = 0; rc == 0 && off < *n; off += BODY_PIECE) {
        size_t k = *n - off < BODY_PIECE ? *n - off : BODY_PIECE;
        if (sqlite3_blob_read(b, *body + off, (int)k, (int)off) != SQLITE_OK)
            rc = fail(d, err, -EIO, "read state");
    }
    sqlite3_blob_close(b);
    if (rc == 0) {
        (*body)[*n] = '\0';
    } else {
        free(*body);
        *body = NULL;
        *n = 0;
    }
    return rc;
}

int db_state_get(db_store *d, const char *node, enum db_state_kind kind, char **etag,
                 char **body, size_t *body_len, sv_error *err)
{
    *etag = *body = NULL;
    *body_len = 0;
    int rc = check_key(node, err);
    if (rc != 0)
        return rc;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(d->h, "SELECT etag, rowid FROM panel_state WHERE node = ?1 AND"
                           " kind = ?2", -1, &st, NULL) != SQLITE_OK)
        return fail(d, err, -EIO, "prepare");
    sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, (int)kind);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        const unsigned char *e = sqlite3_column_text(st, 0);
        if (e != NULL && (*etag = strdup((const char *)e)) == NULL)
            rc = sv_error_set(err, -ENOMEM, "out of memory");
        if (rc == 0)
            rc = body_read(d, sqlite3_column_int64(st, 1), body, body_len, err);
    } else if (s == SQLITE_DONE) {
        rc = sv_error_set(err, -ENOENT, "node %s: no stored state", node);
    } else {
        rc = fail(d, err, -EIO, "read state");
    }
    sqlite3_finalize(st);
    if (rc != 0) {
        free(*etag);
        *etag = NULL;
    }
    sqlite3_db_release_memory(d->h); /* as after db_state_put_pair: the body is copied out */
    return rc;
}

/* ---- audit outbox ------------------------------------------------------------- */

int db_audit_add(db_store *d, const char *node, const sv_audit_hit *hits, size_t n,
                 sv_error *err)
{
    int rc = check_key(node, err);
    if (rc != 0 || n == 0)
        return rc;
    sqlite3_stmt *st = NULL;
    if ((rc = exec(d, "BEGIN IMMEDIATE", err)) != 0)
        return rc;
    if (sqlite3_prepare_v2(d->h, "INSERT OR IGNORE INTO audit_outbox (node, uid, rule, first_ms)"
                           " VALUES (?1, ?2, ?3, ?4)", -1, &st, NULL) != SQLITE_OK) {
        rc = fail(d, err, -EIO, "prepare");
        rollback(d);
        return rc;
    }
    int added = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)hits[i].user);
        sqlite3_bind_int64(st, 3, hits[i].rule);
        sqlite3_bind_int64(st, 4, (sqlite3_int64)hits[i].first_ms);
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = fail(d, err, -EIO, "audit insert");
        else
            added += sqlite3_changes(d->h);
    }
    sqlite3_finalize(st);
    if ((rc = tx_end(d, rc, err)) != 0) {
        return rc;
    }
    return added;
}

/* The rows of @p node (of batch @p batch when >= 0, else all) sorted by uid, rule. */
static int audit_read(db_store *d, const char *node, int64_t batch, db_audit_row **out,
                      size_t *n, sv_error *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st = NULL;
    const char *sql = batch >= 0
        ? "SELECT uid, rule, first_ms, batch FROM audit_outbox WHERE batch = ?2 ORDER BY uid, rule"
        : "SELECT uid, rule, first_ms, batch FROM audit_outbox WHERE node = ?1 ORDER BY uid, rule";
    if (sqlite3_prepare_v2(d->h, sql, -1, &st, NULL) != SQLITE_OK)
        return fail(d, err, -EIO, "prepare");
    if (batch >= 0)
        sqlite3_bind_int64(st, 2, batch);
    else
        sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
    size_t cap = 0;
    int rc = 0, step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            size_t ncap = cap == 0 ? 64 : 2 * cap;
            db_audit_row *p = realloc(*out, ncap * sizeof *p);
            if (p == NULL) {
                rc = sv_error_set(err, -ENOMEM, "out of memory");
                break;
            }
            *out = p;
            cap = ncap;
        }
        (*out)[(*n)++] = (db_audit_row){.user = (uint64_t)sqlite3_column_int64(st, 0),
                                        .rule = sqlite3_column_int64(st, 1),
                                        .first_ms = sqlite3_column_int64(st, 2),
                                        .claimed = sqlite3_column_int64(st, 3) != 0};
    }
    if (rc == 0 && step != SQLITE_DONE)
        rc = fail(d, err, -EIO, "audit read");
    sqlite3_finalize(st);
    if (rc != 0) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

int db_audit_claim(db_store *d, const char *node, db_audit_batch *out, sv_error *err)
{
    memset(out, 0, sizeof *out);
    int rc = check_key(node, err);
    sqlite3_stmt *st = NULL;
    if (rc != 0)
        return rc;
    /* nothing pending (the usual case): no write, no batch id used */
    if (sqlite3_prepare_v2(d->h, "SELECT 1 FROM audit_outbox WHERE node = ?1 LIMIT 1", -1, &st,
                           NULL) != SQLITE_OK)
        return fail(d, err, -EIO, "prepare");
    sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
    int step = sqlite3_step(st);
    sqlite3_finalize(st);
    st = NULL;
    if (step == SQLITE_DONE)
        return 0;
    if (step != SQLITE_ROW)
        return fail(d, err, -EIO, "audit claim");
    if ((rc = exec(d, "BEGIN IMMEDIATE", err)) != 0)
        return rc;
    rc = exec(d, "UPDATE meta SET value = value + 1 WHERE key = 'batch_seq'", err);
    if (rc == 0)
        rc = query_int(d, "SELECT value FROM meta WHERE key = 'batch_seq'", &out->id, err);
    if (rc == 0 && sqlite3_prepare_v2(d->h, "UPDATE audit_outbox SET batch = ?1 WHERE node = ?2",
                                      -1, &st, NULL) != SQLITE_OK)
        rc = fail(d, err, -EIO, "prepare");
    if (rc == 0) {
        sqlite3_bind_int64(st, 1, out->id);
        sqlite3_bind_text(st, 2, node, -1, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = fail(d, err, -EIO, "audit claim");
    }
    sqlite3_finalize(st);
    if (rc == 0)
        rc = audit_read(d, node, out->id, &out->rows, &out->n, err);
    if ((rc = tx_end(d, rc, err)) != 0) {
        db_audit_batch_free(out);
        return rc;
    }
    if (out->n == 0)
        out->id = 0;
    return 0;
}

int db_audit_done(db_store *d, int64_t id, sv_error *err)
{
    if (id == 0)
        return 0;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(d->h, "DELETE FROM audit_outbox WHERE batch = ?1", -1, &st,
                           NULL) != SQLITE_OK)
        return fail(d, err, -EIO, "prepare");
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : fail(d, err, -EIO, "delete audit batch");
    sqlite3_finalize(st);
    return rc;
}

void db_audit_batch_free(db_audit_batch *b)
{
    if (b == NULL)
        return;
    free(b->rows);
    memset(b, 0, sizeof *b);
}

int db_audit_pending(db_store *d, const char *node, db_audit_row **out, size_t *n,
                     sv_error *err)
{
    int rc = check_key(node, err);
    if (rc != 0)
        return rc;
    return audit_read(d, node, -1, out, n, err);
}

int db_hints_save(db_store *d, const sv_ip_hint *v, size_t n, int64_t now_ms, sv_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = exec(d, "BEGIN IMMEDIATE", err);
    if (rc == 0)
        rc = exec(d, "DELETE FROM ip_hints", err);
    if (rc == 0 && sqlite3_prepare_v2(d->h, "INSERT OR REPLACE INTO ip_hints (inbound, ip, uid,"
                                      " age_s, saved_ms) VALUES (?1, ?2, ?3, ?4, ?5)", -1, &st,
                                      NULL) != SQLITE_OK)
        rc = fail(d, err, -EIO, "prepare");
    for (size_t i = 0; i < n && rc == 0; i++) {
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, v[i].inbound, -1, SQLITE_STATIC);
        sqlite3_bind_blob(st, 2, v[i].ip, sizeof v[i].ip, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)v[i].user);
        sqlite3_bind_int64(st, 4, v[i].age_s);
        sqlite3_bind_int64(st, 5, now_ms);
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = fail(d, err, -EIO, "hint insert");
    }
    sqlite3_finalize(st);
    rc = tx_end(d, rc, err);
    return rc;
}

int db_hints_take(db_store *d, int64_t now_ms, sv_ip_hint **out, size_t *n, sv_error *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st = NULL;
    sv_ip_hint *v = NULL;
    size_t k = 0, cap = 0;
    int rc = exec(d, "BEGIN IMMEDIATE", err);
    if (rc == 0 && (sqlite3_prepare_v2(d->h, "SELECT inbound, ip, uid, age_s, saved_ms FROM"
                                       " ip_hints ORDER BY age_s LIMIT ?1", -1, &st,
                                       NULL) != SQLITE_OK ||
                    sqlite3_bind_int64(st, 1, DB_HINTS_TAKE_MAX) != SQLITE_OK))
        rc = fail(d, err, -EIO, "prepare");
    int step = SQLITE_DONE;
    while (rc == 0 && (step = sqlite3_step(st)) == SQLITE_ROW) {
        const char *tag = (const char *)sqlite3_column_text(st, 0);
        const void *ip = sqlite3_column_blob(st, 1);
        int64_t age = sqlite3_column_int64(st, 3), saved = sqlite3_column_int64(st, 4);
        if (now_ms > saved) /* the time katana was down counts */
            age += (now_ms - saved) / 1000;
        if (tag == NULL || strlen(tag) > SV_TAG_MAX || ip == NULL ||
            sqlite3_column_bytes(st, 1) != 16 || age < 0 || age >= SV_IP_HINT_TTL_S)
            continue; /* expired (or not one this version wrote) */
        if (k == cap) {
            size_t c = cap ? 2 * cap : 256;
            sv_ip_hint *g = realloc(v, c * sizeof *g);
            if (g == NULL) {
                rc = sv_error_set(err, -ENOMEM, "out of memory");
                break;
            }
            v = g;
            cap = c;
        }
        sv_ip_hint *h = &v[k++];
        memset(h, 0, sizeof *h);
        snprintf(h->inbound, sizeof h->inbound, "%s", tag);
        memcpy(h->ip, ip, 16);
        h->user = (uint64_t)sqlite3_column_int64(st, 2);
        h->age_s = (uint32_t)age;
    }
    if (rc == 0 && step != SQLITE_DONE)
        rc = fail(d, err, -EIO, "hint read");
    sqlite3_finalize(st);
    if (rc == 0)
        rc = exec(d, "DELETE FROM ip_hints", err);
    if ((rc = tx_end(d, rc, err)) != 0) {
        free(v);
        return rc;
    }
    *out = v;
    *n = k;
    return 0;
}
