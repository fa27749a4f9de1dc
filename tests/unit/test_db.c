/*
 * Unit tests: the SQLite store (db/db.c) on real files in a temp dir — migrations, the usage
 * outbox (merge, claim, delete exactly the batch, crash safety through a killed writer) and the
 * last good panel state, the client IP hints kept across a graceful restart (issue 13).
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "db/db.h"

typedef struct tmp {
    char dir[64];
    char path[96];
} tmp;

static int setup(void **state)
{
    tmp *t = calloc(1, sizeof *t);
    assert_non_null(t);
    snprintf(t->dir, sizeof t->dir, "/tmp/katana-test-db.XXXXXX");
    assert_non_null(mkdtemp(t->dir));
    snprintf(t->path, sizeof t->path, "%s/katana.db", t->dir);
    *state = t;
    return 0;
}

static int teardown(void **state)
{
    tmp *t = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->dir);
    assert_int_equal(system(cmd), 0);
    free(t);
    return 0;
}

static db_store *open_ok(const tmp *t)
{
    db_store *d = NULL;
    sv_error err = {0};
    int rc = db_open(t->path, &d, &err);
    if (rc != 0)
        fail_msg("db_open: %s", err.msg);
    return d;
}

static void add(db_store *d, const char *node, uint64_t uid, uint64_t up, uint64_t down)
{
    sv_usage u = {uid, up, down};
    sv_error err = {0};
    int rc = db_usage_add(d, node, &u, 1, 1000, &err);
    if (rc != 0)
        fail_msg("db_usage_add: %s", err.msg);
}

static int64_t count_rows(const tmp *t, const char *sql)
{
    sqlite3 *h = NULL;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open(t->path, &h), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int64_t n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return n;
}

static void db__open__creates_wal_file_at_current_version(void **state)
{
    tmp *t = *state;
    db_store *d = open_ok(t);
    assert_int_equal(db_schema_version(d), DB_SCHEMA_VERSION);
    db_close(d);
    sqlite3 *h = NULL;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open(t->path, &h), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(h, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    sqlite3_close(h);
}

static void db__migrations__are_idempotent(void **state)
{
    tmp *t = *state;
    db_store *d = open_ok(t);
    add(d, "n1", 7, 10, 20);
    db_close(d);
    for (int i = 0; i < 3; i++) {
        d = open_ok(t);
        assert_int_equal(db_schema_version(d), DB_SCHEMA_VERSION);
        db_close(d);
    }
    assert_int_equal(count_rows(t, "SELECT COUNT(*) FROM schema_version"), 1);
    assert_int_equal(count_rows(t, "SELECT COUNT(*) FROM usage_outbox"), 1);
    assert_int_equal(count_rows(t, "SELECT value FROM meta WHERE key = 'batch_seq'"), 0);
}

/* db_usage_pending_users: per uid sums of open rows and claimed, unfinished batches of one node;
 * a finished batch leaves only the deltas added after its claim. */
static void db__pending_users__sums_open_and_claimed_rows_per_uid(void **state)
{
    tmp *t = *state;
    db_store *d = open_ok(t);
    sv_error err = {0};
    sv_usage *v = NULL;
    size_t n = 99;
    assert_int_equal(db_usage_pending_users(d, "a", &v, &n, &err), 0);
    assert_int_equal(n, 0);
    assert_null(v);
    add(d, "a", 2, 10, 20);
    add(d, "a", 1, 1, 2);
    add(d, "b", 1, 500, 500);
    db_batch b;
    assert_int_equal(db_batch_claim(d, "a", &b, &err), 0);
    add(d, "a", 2, 5, 5); /* after the claim: a new open row */
    assert_int_equal(db_usage_pending_users(d, "a", &v, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(v[0].user, 1);
    assert_int_equal(v[0].up, 1);
    assert_int_equal(v[0].down, 2);
    assert_int_equal(v[1].user, 2);
    assert_int_equal(v[1].up, 15);
    assert_int_equal(v[1].down, 25);
    free(v);
    assert_int_equal(db_batch_done(d, b.id, &err), 0);
    db_batch_free(&b);
    assert_int_equal(db_usage_pending_users(d, "a", &v, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(v[0].user, 2);
    assert_int_equal(v[0].up, 5);
    assert_int_equal(v[0].down, 5);
    free(v);
    db_close(d);
}

static void db__newer_schema__is_refused(void **state)
{
    tmp *t = *state;
    db_close(open_ok(t));
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open(t->path, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h, "UPDATE schema_version SET version = 99", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(h);
    db_store *d = NULL;
    sv_error err = {0};
    assert_int_equal(db_open(t->path, &d, &err), -EPROTO);
    assert_null(d);
    assert_non_null(strstr(err.msg, "newer"));
}

/* Issue 33: schema 5 puts a state row's body last (stored through a zeroblob, written in
 * pieces); a file of schema 4 keeps its stored state, read back after the migration. */
static void db__schema_4_state__is_kept_by_the_migration(void **state)
{
    tmp *t = *state;
    db_close(open_ok(t));
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open(t->path, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h, "DROP TABLE panel_state;"
                                     "CREATE TABLE panel_state (node TEXT NOT NULL,"
                                     " kind INTEGER NOT NULL, etag TEXT, body BLOB NOT NULL,"
                                     " saved_ms INTEGER NOT NULL, PRIMARY KEY (node, kind));"
                                     "INSERT INTO panel_state VALUES ('a', 1, '\"e4\"',"
                                     " X'7B227573657273223A5B5D7D', 7);"
                                     "UPDATE schema_version SET version = 4", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(h);
    db_store *d = open_ok(t);
    assert_int_equal(db_schema_version(d), DB_SCHEMA_VERSION);
    char *etag = NULL, *body = NULL;
    size_t len = 0;
    sv_error err = {0};
    assert_int_equal(db_state_get(d, "a", DB_STATE_USERS, &etag, &body, &len, &err), 0);
    assert_string_equal(etag, "\"e4\"");
    assert_int_equal(len, 12);
    assert_memory_equal(body, "{\"users\":[]}", 12);
    free(etag);
    free(body);
    /* a body over one piece of the incremental write, and an empty one, read back */
    size_t big = (3u << 20) + 5;
    char *b = malloc(big);
    assert_non_null(b);
    for (size_t i = 0; i < big; i++)
        b[i] = (char)('a' + i % 23);
    assert_int_equal(db_state_put(d, "a", DB_STATE_USERS, "\"e5\"", b, big, 8, &err), 0);
    assert_int_equal(db_state_put(d, "a", DB_STATE_CONFIG, NULL, "", 0, 8, &err), 0);
    assert_int_equal(db_state_get(d, "a", DB_STATE_USERS, &etag, &body, &len, &err), 0);
    assert_int_equal(len, big);
    assert_memory_equal(body, b, big);
    free(etag);
    free(body);
    assert_int_equal(db_state_get(d, "a", DB_STATE_CONFIG, &etag, &body, &len, &err), 0);
    assert_int_equal(len, 0);
    assert_null(etag);
    free(body);
    free(b);
    db_close(d);
}

/* One process per database (issue 15): a second open is refused naming the holder's pid, and
 * the lock goes with the holder, kill -9 included. */
static void db__second_process__is_refused_until_the_holder_dies(void **state)
{
    tmp *t = *state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        db_store *d = NULL;
        if (db_open(t->path, &d, NULL) != 0 || write(fds[1], "x", 1) != 1)
            _exit(2);
        pause();
        _exit(0);
    }
    close(fds[1]);
    char c;
    assert_int_equal(read(fds[0], &c, 1), 1);
    close(fds[0]);
    db_store *d = NULL;
    sv_error err = {0};
    assert_int_equal(db_open(t->path, &d, &err), -EBUSY);
    assert_null(d);
    /* another name of the same file takes the same lock */
    char alias[sizeof t->path + 16];
    snprintf(alias, sizeof alias, "%s/alias.db", t->dir);
    assert_int_equal(symlink("katana.db", alias), 0);
    sv_error err2 = {0};
    assert_int_equal(db_open(alias, &d, &err2), -EBUSY);
    assert_null(d);
    char want[64];
    snprintf(want, sizeof want, "in use by another katana (pid %ld)", (long)pid);
    if (strstr(err.msg, want) == NULL)
        fail_msg("unexpected error text: %s", err.msg);
    kill(pid, SIGKILL);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    d = open_ok(t);
    assert_non_null(d);
    db_close(d);
}

static void db__bad_path__fails_with_message(void **state)
{
    (void)state;
    db_store *d = NULL;
    sv_error err = {0};
    assert_int_equal(db_open("/nonexistent-dir/x/katana.db", &d, &err), -EIO);
    assert_null(d);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/x/katana.db"));
}

static void db__add__merges_per_node_and_uid(void **state)
{
    tmp *t = *state;
    db_store *d = open_ok(t);
    sv_usage batch[] = {{1, 100, 200}, {2, 5, 0}, {1, 1, 2}, {3, 0, 0}};
    sv_error err = {0};
    assert_int_equal(db_usage_add(d, "a", batch, 4, 1000, &err), 0);
    add(d, "b", 1, 1000, 1000);
    db_close(d);
    /* one open row per (node, uid); the zero delta wrote nothing */
    assert_int_equal(count_rows(t, "SELECT COUNT(*) FROM usage_outbox"), 3);
    d = open_ok(t);
    db_batch b;
    assert_int_equal(db_batch_claim(d, "a", &b, &err), 0);
    assert_int_equal(b.n, 2);
    assert_true(b.id > 0);
    assert_int_equal(b.items[0].user, 1);
    assert_int_equal(b.items[0].up, 101);
    assert_int_equal(b.items[0].down, 202);
    assert_int_equal(b.items[1].user, 2);
    assert_int_equal(b.items[1].up, 5);
    db_batch_free(&b);
    db_close(d);
}

static void db__done__deletes_only_the_batch(void **state)
{
    tmp *t = *state;
    db_store *d = open_ok(t);
    sv_error err = {0};
    add(d, "a", 1, 10, 20);
    add(d, "b", 1, 7, 7);
    db_batch b;
    assert_int_equal(db_batch_claim(d, "a", &b, &err), 0);
    assert_int_equal(b.n, 1);
    /* deltas that arrive while the push is in flight */
    add(d, "a", 1, 3, 4);
    add(d, "a", 9, 1, 1);
    assert_int_equal(db_batch_done(d, b.id, &err), 0);
    db_batch_free(&b);
    db_batch next;
    assert_int_equal(db_batch_claim(d, "a", &next, &err), 0);
    assert_int_equal(next.n, 2);
    assert_int_equal(next.items[0].user, 1);
    assert_int_equal(next.items[0].up, 3);
    assert_int_equal(next.items[0].down, 4);
    assert_int_equal(next.items[1].user, 9);
    db_batch_free(&next);
    /* node b untouched */
    uint64_t bytes = 0;
    int64_t oldest = 0;
    assert_int_equal(db_usage_pending(d, "b", &bytes, &oldest, &err), 0);
    assert_int_equal(bytes, 14);
    assert_int_equal(oldest, 1000);
    db_close(d);
}

/* issue 24 (PANEL.md §2.6): a batch held after a 5xx cannot be claimed; its settlement against
 * the panel's list deletes the uids before the first unlisted one (billed), moves every unlisted
 * uid to usage_dropped, and leaves the rest for the next claim, merged with later deltas; the
 * hold survives a reopen. */
static void db__settle__splits_a_held_batch_at_the_first_unlisted_user(void **state)
{
    tmp *t = *state;
    db_store *d = open_ok(t);
    sv_error err = {0};
    add(d, "a", 11, 100, 1000);
    add(d, "a", 12, 200, 2000);
    add(d, "a", 13, 300, 3000);
    add(d, "a", 14, 400, 4000);
    add(d, "a", 15, 500, 5000);
    db_batch b;
    assert_int_equal(db_batch_claim(d, "a", &b, &err), 0);
    assert_int_equal(b.n, 5);
    assert_int_equal(db_batch_hold(d, "a", b.id, 5000, &err), 0);
    add(d, "a", 13, 1, 1); /* a delta while held: open row, not part of the batch */
    db_close(d);
    d = open_ok(t);
    int64_t held = 0;
    assert_int_equal(db_batch_held(d, "a", &held, &err), 0);
    assert_int_equal(held, b.id);
    db_batch again;
    assert_int_equal(db_batch_claim(d, "a", &again, &err), -EBUSY);
    assert_int_equal(again.n, 0);
    const uint64_t listed[] = {11, 13, 15}; /* 12 and 14 deleted from the panel */
    db_settled st;
    assert_int_equal(db_batch_settle(d, "a", listed, 3, 6000, &st, &err), 0);
    assert_int_equal(st.batch, b.id);
    assert_true(st.explained);
    assert_int_equal(st.n_applied, 1);
    assert_int_equal(st.applied_bytes, 1100);
    assert_int_equal(st.n_dropped, 2);
    assert_int_equal(st.dropped[0].user, 12);
    assert_int_equal(st.dropped[0].down, 2000);
    assert_int_equal(st.dropped[1].user, 14);
    assert_int_equal(st.n_kept, 2);
    db_settled_free(&st);
    assert_int_equal(db_batch_held(d, "a", &held, &err), 0);
    assert_int_equal(held, 0);
    db_batch next;
    assert_int_equal(db_batch_claim(d, "a", &next, &err), 0);
    assert_int_equal(next.n, 2);
    assert_int_equal(next.items[0].user, 13);
    assert_int_equal(next.items[0].up, 301);
    assert_int_equal(next.items[1].user, 15);
    assert_int_equal(next.items[1].down, 5000);
    db_batch_free(&next);
    db_batch_free(&b);
    db_close(d);
    assert_int_equal(count_rows(t, "SELECT COUNT(*) FROM usage_dropped WHERE node = 'a'"), 2);
    assert_int_equal(count_rows(t, "SELECT SUM(up + down) FROM usage_dropped"), 6600);
}

/* issue 24: when every user of a held batch is still listed, nothing explains the 5xx: the hold
 * ends and the batch is claimed again whole; with nothing held a settlement does nothing. */
static void db__settle__without_an_unlisted_user_resends_the_whole_batch(void **state)
{
    tmp *t = *state;
    db_store *d = open_ok(t);
    sv_error err = {0};
    db_settled st;
    assert_int_equal(db_batch_settle(d, "a", NULL, 0, 1, &st, &err), 0);
    assert_int_equal(st.batch, 0);
    add(d, "a", 1, 10, 20);
    add(d, "a", 2, 30, 40);
    db_batch b;
    assert_int_equal(db_batch_claim(d, "a", &b, &err), 0);
    assert_int_equal(db_batch_hold(d, "a", b.id, 1, &err), 0);
    assert_int_not_equal(db_batch_hold(d, "a", b.id, 1, &err), 0); /* one hold per node */
    const uint64_t listed[] = {1, 2, 3};
    assert_int_equal(db_batch_settle(d, "a", listed, 3, 2, &st, &err), 0);
    assert_int_equal(st.batch, b.id);
    assert_false(st.explained);
    assert_int_equal(st.n_kept, 2);
    assert_int_equal(st.n_applied + st.n_dropped, 0);
    db_settled_free(&st);
    db_batch next;
    assert_int_equal(db_batch_claim(d, "a", &next, &err), 0);
    assert_int_equal(next.n, 2);
    assert_int_equal(next.items[1].up, 30);
    db_batch_free(&next);
    db_batch_free(&b);
    db_close(d);
    assert_int_equal(count_rows(t, "SELECT COUNT(*) FROM usage_dropped"), 0);
}

/* issue 14: a node removed from its Xboard machine hands its pending usage (open rows and an
 * unacknowledged batch) to another node; per-user totals are kept exactly. */
static void db__move__hands_every_pending_row_to_the_other_node(void **state)
{
    tmp *t = *state;
    db_store *d = open_ok(t);
    sv_error err = {0};
    add(d, "gone", 1, 10, 20);
    db_batch lost;
    assert_int_equal(db_batch_claim(d, "gone", &lost, &err), 0); /* answer never came */
    db_batch_free(&lost);
    add(d, "gone", 1, 1, 2);
    add(d, "gone", 2, 5, 5);
    add(d, "live", 1, 100, 200);
    assert_int_equal(db_state_put(d, "gone", DB_STATE_CONFIG, NULL, "{}", 2, 1, &err), 0);
    assert_int_equal(db_usage_move(d, "gone", "live", &err), 0);
    uint64_t bytes = 0;
    int64_t oldest = 0;
    assert_int_equal(db_usage_pending(d, "gone", &bytes, &oldest, &err), 0);
    assert_int_equal(bytes, 0);
    assert_int_equal(count_rows(t, "SELECT COUNT(*) FROM panel_state WHERE node = 'gone'"), 0);
    db_batch b;
    assert_int_equal(db_batch_claim(d, "live", &b, &err), 0);
    assert_int_equal(b.n, 2);
    assert_int_equal(b.items[0].user, 1);
    assert_int_equal(b.items[0].up, 111);
    assert_int_equal(b.items[0].down, 222);
    assert_int_equal(b.items[1].user, 2);
    assert_int_equal(b.items[1].up, 5);
    assert_int_equal(db_batch_done(d, b.id, &err), 0);
    db_batch_free(&b);
    assert_int_equal(count_rows(t, "SELECT COUNT(*) FROM usage_outbox"), 0);
    db_close(d);
}

static void db__failed_batch__is_resent_merged_with_later_deltas(void **state)
{
    tmp *t = *state;
    db_store *d = open_ok(t);
    sv_error err = {0};
    add(d, "a", 1, 10, 20);
    db_batch b1;
    assert_int_equal(db_batch_claim(d, "a", &b1, &err), 0);
    add(d, "a", 1, 5, 5); /* push failed: b1 never done */
    db_batch b2;
    assert_int_equal(db_batch_claim(d, "a", &b2, &err), 0);
    assert_true(b2.id != b1.id);
    assert_int_equal(b2.n, 1);
    assert_int_equal(b2.items[0].up, 15);
    assert_int_equal(b2.items[0].down, 25);
    /* the late answer of the first push deletes nothing of the second batch */
    assert_int_equal(db_batch_done(d, b1.id, &err), 0);
    uint64_t bytes = 0;
    int64_t oldest = 0;
    assert_int_equal(db_usage_pending(d, NULL, &bytes, &oldest, &err), 0);
    assert_int_equal(bytes, 40);
    assert_int_equal(db_batch_done(d, b2.id, &err), 0);
    assert_int_equal(db_usage_pending(d, NULL, &bytes, &oldest, &err), 0);
    assert_int_equal(bytes, 0);
    assert_int_equal(oldest, 0);
    db_batch_free(&b1);
    db_batch_free(&b2);
    db_close(d);
}

static void db__empty_claim__has_no_batch(void **state)
{
    tmp *t = *state;
    db_store *d = open_ok(t);
    sv_error err = {0};
    db_batch b;
    assert_int_equal(db_batch_claim(d, "a", &b, &err), 0);
    assert_int_equal(b.id, 0);
    assert_int_equal(b.n, 0);
    assert_null(b.items);
    assert_int_equal(db_batch_done(d, 0, &err), 0);
    db_close(d);
}

static void db__overflow__is_refused_and_writes_nothing(void **state)
{
    tmp *t = *state;
    db_store *d = open_ok(t);
    sv_error err = {0};
    add(d, "a", 1, (uint64_t)INT64_MAX - 1, 0);
    sv_usage two[] = {{2, 1, 1}, {1, 2, 0}};
    assert_int_equal(db_usage_add(d, "a", two, 2, 1000, &err), -EOVERFLOW);
    sv_usage big = {3, UINT64_MAX, 0};
    assert_int_equal(db_usage_add(d, "a", &big, 1, 1000, &err), -EOVERFLOW);
    db_batch b;
    assert_int_equal(db_batch_claim(d, "a", &b, &err), 0);
    assert_int_equal(b.n, 1); /* uid 2 rolled back with the transaction */
    assert_int_equal(b.items[0].up, (uint64_t)INT64_MAX - 1);
    db_batch_free(&b);
    db_close(d);
}

static void db__large_values__round_trip(void **state)
{
    tmp *t = *state;
    db_store *d = open_ok(t);
    sv_error err = {0};
    add(d, "a", 4000000000ull, 5000000000000ull, 6000000000000ull);
    add(d, "a", 4000000000ull, 5000000000000ull, 1);
    db_batch b;
    assert_int_equal(db_batch_claim(d, "a", &b, &err), 0);
    assert_int_equal(b.items[0].user, 4000000000ull);
    assert_int_equal(b.items[0].up, 10000000000000ull);
    assert_int_equal(b.items[0].down, 6000000000001ull);
    db_batch_free(&b);
    db_close(d);
}

/* A writer killed with SIGKILL between transactions loses none it reported as committed. */
static void db__killed_writer__keeps_every_committed_merge(void **state)
{
    tmp *t = *state;
    db_close(open_ok(t));
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        db_store *d = NULL;
        if (db_open(t->path, &d, NULL) != 0)
            _exit(2);
        for (int i = 0; i < 100000; i++) {
            sv_usage u = {1, 1, 2};
            if (db_usage_add(d, "a", &u, 1, 1000, NULL) != 0)
                _exit(3);
            if (write(fds[1], "x", 1) != 1)
                _exit(4);
        }
        _exit(0);
    }
    close(fds[1]);
    char c;
    long acked = 0;
    while (acked < 200 && read(fds[0], &c, 1) == 1)
        acked++;
    assert_int_equal(kill(pid, SIGKILL), 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    while (read(fds[0], &c, 1) == 1) /* commits acknowledged before the kill */
        acked++;
    close(fds[0]);
    db_store *d = open_ok(t);
    sv_error err = {0};
    db_batch b;
    assert_int_equal(db_batch_claim(d, "a", &b, &err), 0);
    assert_int_equal(b.n, 1);
    /* every acknowledged commit is there; at most one more committed before its ack */
    assert_true((long)b.items[0].up >= acked && (long)b.items[0].up <= acked + 1);
    assert_int_equal(b.items[0].down, 2 * b.items[0].up);
    db_batch_free(&b);
    db_close(d);
}

static void db__state__stores_body_and_etag_per_node_and_kind(void **state)
{
    tmp *t = *state;
    db_store *d = open_ok(t);
    sv_error err = {0};
    char *etag = NULL, *body = NULL;
    size_t len = 0;
    assert_int_equal(db_state_get(d, "a", DB_STATE_CONFIG, &etag, &body, &len, &err), -ENOENT);
    const char *cfg = "{\"server_port\":8388}";
    assert_int_equal(db_state_put(d, "a", DB_STATE_CONFIG, "\"abc\"", cfg, strlen(cfg), 1, &err),
                     0);
    assert_int_equal(db_state_put(d, "a", DB_STATE_USERS, NULL, "{\"users\":[]}", 12, 1, &err),
                     0);
    assert_int_equal(db_state_put(d, "a", DB_STATE_CONFIG, "W/\"x y\"", cfg, strlen(cfg), 2,
                                  &err), 0);
    db_close(d);
    d = open_ok(t);
    assert_int_equal(db_state_get(d, "a", DB_STATE_CONFIG, &etag, &body, &len, &err), 0);
    assert_string_equal(etag, "W/\"x y\""); /* verbatim, the latest */
    assert_string_equal(body, cfg);
    assert_int_equal(len, strlen(cfg));
    free(etag);
    free(body);
    assert_int_equal(db_state_get(d, "a", DB_STATE_USERS, &etag, &body, &len, &err), 0);
    assert_null(etag);
    assert_string_equal(body, "{\"users\":[]}");
    free(body);
    assert_int_equal(db_state_get(d, "b", DB_STATE_USERS, &etag, &body, &len, &err), -ENOENT);
    char longkey[DB_KEY_MAX + 2];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    assert_int_equal(db_state_put(d, longkey, DB_STATE_USERS, NULL, "{}", 2, 1, &err), -EINVAL);
    /* issue 13: a users body of a large panel (40 MiB, ~400 000 users; 32 MiB was the limit
     * while panels may send 256) is stored and read back */
    size_t big = 40u << 20;
    char *huge = malloc(big);
    assert_non_null(huge);
    memset(huge, ' ', big);
    huge[0] = '{';
    huge[big - 1] = '}';
    assert_int_equal(db_state_put(d, "a", DB_STATE_USERS, NULL, huge, big, 3, &err), 0);
    assert_int_equal(db_state_get(d, "a", DB_STATE_USERS, &etag, &body, &len, &err), 0);
    assert_int_equal(len, big);
    assert_memory_equal(body, huge, big);
    free(body);
    free(huge);
    db_close(d);
}

/* Issue 15: the pair that applied is stored in one transaction; a failure writes neither. */
static void db__state_pair__is_written_together_or_not_at_all(void **state)
{
    tmp *t = *state;
    db_store *d = open_ok(t);
    sv_error err = {0};
    char *etag = NULL, *body = NULL;
    size_t len = 0;
    db_state_body cfg = {"\"c1\"", "{\"server_port\":1}", 17};
    db_state_body users = {"\"u1\"", "{\"users\":[]}", 12};
    assert_int_equal(db_state_put_pair(d, "a", &cfg, &users, 1, &err), 0);
    /* users only (the config came from the store): the stored config stays */
    db_state_body users2 = {"\"u2\"", "{\"users\":[{}]}", 14};
    db_state_body none = {NULL, NULL, 0};
    assert_int_equal(db_state_put_pair(d, "a", &none, &users2, 2, &err), 0);
    /* an ETag over the limit fails the second write: the first is rolled back */
    char long_etag[DB_KEY_MAX + 2];
    memset(long_etag, 'e', sizeof long_etag - 1);
    long_etag[sizeof long_etag - 1] = '\0';
    db_state_body cfg3 = {"\"c3\"", "{\"server_port\":3}", 17};
    db_state_body users3 = {long_etag, "{\"users\":[]}", 12};
    assert_int_equal(db_state_put_pair(d, "a", &cfg3, &users3, 3, &err), -EINVAL);
    db_close(d);
    d = open_ok(t);
    assert_int_equal(db_state_get(d, "a", DB_STATE_CONFIG, &etag, &body, &len, &err), 0);
    assert_string_equal(etag, "\"c1\"");
    assert_string_equal(body, "{\"server_port\":1}");
    free(etag);
    free(body);
    assert_int_equal(db_state_get(d, "a", DB_STATE_USERS, &etag, &body, &len, &err), 0);
    assert_string_equal(etag, "\"u2\"");
    assert_string_equal(body, "{\"users\":[{}]}");
    free(etag);
    free(body);
    db_close(d);
}

/* issue 12: an audit pair is pending once per period (until its batch is done), survives a
 * close and reopen, and a claim takes every pending row of the node only. */
static void db__audit__once_per_period_and_durable(void **state)
{
    tmp *t = *state;
    db_store *d = open_ok(t);
    sv_error err = {0};
    sv_audit_hit h[] = {{.user = 7, .rule = 9, .first_ms = 1000},
                        {.user = 3, .rule = 9, .first_ms = 1100},
                        {.user = 7, .rule = 9, .first_ms = 1200}};
    assert_int_equal(db_audit_add(d, "n1", h, 3, &err), 2);
    assert_int_equal(db_audit_add(d, "n1", h, 1, &err), 0); /* already pending */
    assert_int_equal(db_audit_add(d, "n2", h, 1, &err), 1); /* another node */
    db_close(d);
    d = open_ok(t); /* a restart keeps them */
    db_audit_row *rows = NULL;
    size_t n = 0;
    assert_int_equal(db_audit_pending(d, "n1", &rows, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(rows[0].user, 3);
    assert_int_equal(rows[1].user, 7);
    assert_int_equal(rows[1].first_ms, 1000);
    assert_false(rows[1].claimed);
    free(rows);
    db_audit_batch b;
    assert_int_equal(db_audit_claim(d, "n1", &b, &err), 0);
    assert_true(b.id > 0);
    assert_int_equal(b.n, 2);
    assert_int_equal(db_audit_add(d, "n1", h, 1, &err), 0); /* claimed: still this period */
    assert_int_equal(db_audit_done(d, b.id, &err), 0);
    db_audit_batch_free(&b);
    assert_int_equal(db_audit_pending(d, "n1", &rows, &n, &err), 0);
    assert_int_equal(n, 0);
    assert_int_equal(db_audit_pending(d, "n2", &rows, &n, &err), 0);
    assert_int_equal(n, 1);
    free(rows);
    assert_int_equal(db_audit_add(d, "n1", h, 1, &err), 1); /* the next period */
    assert_int_equal(db_audit_claim(d, "n3", &b, &err), 0);
    assert_int_equal(b.id, 0);
    assert_int_equal(b.n, 0);
    db_close(d);
}

/* Hints saved at a stop are taken once, older by the time katana was down; expired ones and a
 * second save's predecessors are gone; they survive closing the file. */
static void db__hints__saved_then_taken_once_aged_by_the_downtime(void **state)
{
    tmp *t = *state;
    db_store *d = open_ok(t);
    sv_error err = {0};
    sv_ip_hint h[3] = {{.inbound = "n1", .user = 7, .age_s = 5},
                       {.inbound = "n1", .user = 8, .age_s = SV_IP_HINT_TTL_S - 20},
                       {.inbound = "n2", .user = UINT64_MAX, .age_s = 0}};
    h[0].ip[15] = 1;
    h[1].ip[15] = 2;
    h[2].ip[0] = 0x20;
    assert_int_equal(db_hints_save(d, h, 1, 1000, &err), 0);
    assert_int_equal(db_hints_save(d, h, 3, 1000000, &err), 0); /* replaces the first save */
    assert_int_equal(count_rows(t, "SELECT COUNT(*) FROM ip_hints"), 3);
    db_close(d);
    d = open_ok(t);
    sv_ip_hint *v = NULL;
    size_t n = 0;
    assert_int_equal(db_hints_take(d, 1000000 + 30500, &v, &n, &err), 0); /* 30 s later */
    assert_int_equal(n, 2); /* h[1] expired meanwhile */
    for (size_t i = 0; i < n; i++) {
        const sv_ip_hint *want = v[i].user == 7 ? &h[0] : &h[2];
        assert_string_equal(v[i].inbound, want->inbound);
        assert_memory_equal(v[i].ip, want->ip, 16);
        assert_int_equal(v[i].user, want->user);
        assert_int_equal(v[i].age_s, want->age_s + 30);
    }
    free(v);
    assert_int_equal(count_rows(t, "SELECT COUNT(*) FROM ip_hints"), 0);
    v = NULL;
    assert_int_equal(db_hints_take(d, 1000000 + 31000, &v, &n, &err), 0); /* taken once */
    assert_int_equal(n, 0);
    assert_null(v);
    db_close(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(db__open__creates_wal_file_at_current_version, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(db__migrations__are_idempotent, setup, teardown),
        cmocka_unit_test_setup_teardown(db__audit__once_per_period_and_durable, setup, teardown),
        cmocka_unit_test_setup_teardown(db__pending_users__sums_open_and_claimed_rows_per_uid,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(db__newer_schema__is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(db__schema_4_state__is_kept_by_the_migration, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(db__bad_path__fails_with_message, setup, teardown),
        cmocka_unit_test_setup_teardown(db__add__merges_per_node_and_uid, setup, teardown),
        cmocka_unit_test_setup_teardown(db__done__deletes_only_the_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(db__settle__splits_a_held_batch_at_the_first_unlisted_user,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            db__settle__without_an_unlisted_user_resends_the_whole_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(db__move__hands_every_pending_row_to_the_other_node,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(db__failed_batch__is_resent_merged_with_later_deltas,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(db__empty_claim__has_no_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(db__overflow__is_refused_and_writes_nothing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(db__large_values__round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(db__second_process__is_refused_until_the_holder_dies,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(db__killed_writer__keeps_every_committed_merge, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(db__state_pair__is_written_together_or_not_at_all,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(db__state__stores_body_and_etag_per_node_and_kind,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(db__hints__saved_then_taken_once_aged_by_the_downtime,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
