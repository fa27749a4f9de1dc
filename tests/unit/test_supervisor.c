/*
 * The supervisor actor with real worker threads (issue 8 "Fixes found in review"):
 *  - sv_epoch() is an epoch every worker has adopted: sv_apply returns only once they all did,
 *    even when a worker is slow to take the plane (the test hook makes it slow);
 *  - commit cannot fail: every message it sends is allocated in prepare, so a failed
 *    allocation fails the apply (nothing changes) instead of dropping a worker's message;
 *  - client IP hints go to every worker's table and come back by user id (issue 13: a graceful
 *    restart keeps them), without the users removed, expired or unknown.
 * Listeners bind a free port on 127.0.0.1 only.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <uv.h>

#include "supervisor/principal.h"
#include "supervisor/proto/ss_ops.h"
#include "supervisor/runtime.h"

#define WORKERS 2

/* ---- fixture ------------------------------------------------------------------------------ */

static _Atomic uint64_t seen[WORKERS]; /**< the epoch each worker adopted last (test hook) */

typedef struct fx {
    uv_loop_t loop;
    sv_supervisor *sv;
    sv_spec spec;
    sv_inbound_spec in[1];
    sv_outbound_spec out[2];
    sv_user_set sets[1];
    sv_user users[1];
    uint16_t port;
} fx;

/* A port free on 127.0.0.1 right now (the kernel's pick). */
static uint16_t free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* Outbounds direct and direct2; @p listen: inbound ss1 on 127.0.0.1:port for user 1;
 * @p variant picks the default route (each change of it publishes a plane). */
static void fx_spec(fx *f, bool listen, int variant)
{
    f->in[0] = (sv_inbound_spec){.tag = "ss1", .bind = {"127.0.0.1", f->port},
                                 .protocol = SV_INBOUND_SHADOWSOCKS,
                                 .ss_cipher = SV_SS_AES_128_GCM, .users = "u"};
    f->out[0] = (sv_outbound_spec){.tag = "direct", .kind = SV_OUTBOUND_DIRECT};
    f->out[1] = (sv_outbound_spec){.tag = "direct2", .kind = SV_OUTBOUND_DIRECT};
    f->users[0] = (sv_user){.id = 1, .secret = "secret-1"};
    f->sets[0] = (sv_user_set){.tag = "u", .users = f->users, .n_users = 1};
    f->spec = (sv_spec){.inbounds = f->in, .n_inbounds = listen ? 1 : 0, .outbounds = f->out,
                        .n_outbounds = 2, .user_sets = f->sets, .n_user_sets = 1,
                        .route = {.default_outbound = variant % 2 ? "direct2" : "direct"}};
}

static int setup(void **state)
{
    static fx f;
    memset(&f, 0, sizeof f);
    memset(&sv__test_hooks, 0, sizeof sv__test_hooks);
    for (unsigned w = 0; w < WORKERS; w++)
        atomic_store(&seen[w], 0);
    assert_int_equal(uv_loop_init(&f.loop), 0);
    sv_options opts = {.workers = WORKERS};
    assert_int_equal(sv_supervisor_new(&f.loop, &opts, &f.sv), 0);
    f.port = free_port();
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    memset(&sv__test_hooks, 0, sizeof sv__test_hooks);
    sv_supervisor_free(f->sv);
    uv_run(&f->loop, UV_RUN_DEFAULT); /* the sampler's timer closes */
    assert_int_equal(uv_loop_close(&f->loop), 0);
    return 0;
}

/* ---- sv_epoch() is adopted by every worker --------------------------------------------------- */

/* A worker that takes its time before adopting a plane (as a busy loop would). */
static void slow_adopting(unsigned worker, uint64_t epoch)
{
    usleep(100 * 1000);
    atomic_store(&seen[worker], epoch);
}

static void apply_returns_once_every_worker_adopted_the_plane(void **state)
{
    fx *f = *state;
    sv__test_hooks.adopting = slow_adopting;
    for (int round = 0; round < 3; round++) {
        fx_spec(f, round > 0, round);
        sv_error err = {0};
        assert_int_equal(sv_apply(f->sv, &f->spec, NULL, NULL, &err), 0);
        uint64_t epoch = sv_epoch(f->sv);
        assert_int_equal(epoch, (uint64_t)round + 1);
        for (unsigned w = 0; w < WORKERS; w++)
            assert_int_equal(atomic_load(&seen[w]), epoch); /* the worker has it, not only sv */
    }
}

/* ---- commit sends only what prepare allocated ------------------------------------------------ */

static _Atomic int allocs_left; /* the allocation after this many fails; < 0: none fails */

static bool countdown_fails(void)
{
    int left = atomic_load(&allocs_left);
    if (left < 0)
        return false;
    atomic_store(&allocs_left, left - 1);
    return left == 0;
}

/* Record the plane each worker adopts. */
static void note_adopting(unsigned worker, uint64_t epoch) { atomic_store(&seen[worker], epoch); }

static void a_failed_message_allocation_fails_the_apply_not_a_worker(void **state)
{
    fx *f = *state;
    sv__test_hooks.alloc_fails = countdown_fails;
    sv__test_hooks.adopting = note_adopting;
    uint64_t epoch = sv_epoch(f->sv);
    int failed = 0, published = 0;
    /* fail the 1st, 2nd, ... allocation of an apply: listeners start and stop, planes change */
    for (int k = 0; k < 20; k++) {
        if (k % 4 == 0) /* a new port: a stopped listener's socket may still close on a worker */
            f->port = free_port();
        fx_spec(f, k % 4 < 2, k);
        atomic_store(&allocs_left, k % 5);
        sv_error err = {0};
        int rc = sv_apply(f->sv, &f->spec, NULL, NULL, &err);
        atomic_store(&allocs_left, -1);
        uint64_t now = sv_epoch(f->sv);
        if (rc != 0) {
            failed++;
            assert_int_equal(rc, -ENOMEM);
            assert_int_equal(now, epoch); /* nothing was published */
        } else {
            assert_true(now >= epoch);
            published += now > epoch;
        }
        /* every worker took every plane that was published: none missed its message */
        for (unsigned w = 0; w < WORKERS; w++)
            assert_int_equal(atomic_load(&seen[w]), now);
        epoch = now;
    }
    assert_true(failed > 0);
    assert_true(published > 0);
    fx_spec(f, true, 1);
    f->out[1].tag = "direct3"; /* a new outbound: a new plane */
    f->spec.route.default_outbound = "direct3";
    sv_error err = {0};
    assert_int_equal(sv_apply(f->sv, &f->spec, NULL, NULL, &err), 0);
    assert_int_equal(sv_epoch(f->sv), epoch + 1);
    for (unsigned w = 0; w < WORKERS; w++)
        assert_int_equal(atomic_load(&seen[w]), epoch + 1);
}

/* Issue 13: a handler rebuilt for a reload keeps its unchanged users' principals and copies
 * their Shadowsocks keys from the handler it replaces; a changed secret, a moved user and a new
 * user get what a fresh build gives them, and a new cipher derives every key again. */
static void rebuilt_handler_reuses_unchanged_users_only(void **state)
{
    (void)state;
    char s1[] = "secret-1", s2[] = "secret-2", s3[] = "secret-3", s2b[] = "secret-2-new",
         s4[] = "secret-4";
    sv_user old_users[] = {{.id = 1, .secret = s1}, {.id = 2, .secret = s2},
                           {.id = 3, .secret = s3}};
    /* user 3 moved to the front, user 2 has a new secret, user 4 is new, user 1 unchanged */
    sv_user new_users[] = {{.id = 3, .secret = s3, .device_limit = 4}, {.id = 1, .secret = s1},
                           {.id = 2, .secret = s2b}, {.id = 4, .secret = s4}};
    sv_user_set old_set = {.tag = (char *)"u", .users = old_users, .n_users = 3};
    sv_user_set new_set = {.tag = (char *)"u", .users = new_users, .n_users = 4};
    sv_inbound_spec in = {.tag = (char *)"in", .protocol = SV_INBOUND_SHADOWSOCKS,
                          .ss_cipher = SV_SS_AES_256_GCM, .users = (char *)"u"};
    sv_replay_ref *replay = sv_replay_ref_new();
    assert_non_null(replay);
    sv_error err = {0};
    sv_handler *was = sv_handler_new(&in, &old_set, NULL, replay, NULL, &err);
    assert_non_null(was);
    sv_handler_was prev = {.handler = was, .users = &old_set};
    sv_handler *now = sv_handler_new(&in, &new_set, &prev, replay, NULL, &err);
    assert_non_null(now);
    assert_ptr_equal(now->principals[0], was->principals[2]);
    assert_int_equal(sv_principal_device_limit(now->principals[0]), 4);
    assert_ptr_equal(now->principals[1], was->principals[0]);
    assert_ptr_not_equal(now->principals[2], was->principals[1]);
    assert_int_equal(now->principals[2]->id, 2);
    const sv_ss_keyring *ring = sv_ss_creds_ring(now->creds);
    uint8_t key[SV_SS_KEY_MAX];
    for (size_t i = 0; i < 4; i++) { /* every key is the one its secret derives */
        assert_int_equal(sv_ss_password_to_key(in.ss_cipher, new_users[i].secret, key), 0);
        assert_memory_equal(ring->keys[i], key, 32);
    }
    /* another set tag: nothing is kept */
    sv_user_set other = new_set;
    other.tag = (char *)"v";
    sv_handler *elsewhere = sv_handler_new(&in, &other, &prev, replay, NULL, &err);
    assert_non_null(elsewhere);
    assert_ptr_not_equal(elsewhere->principals[1], was->principals[0]);
    /* nothing is derived for an unchanged user: with MD5 unavailable (OpenSSL restricted to
     * FIPS-approved algorithms) the same set still builds, and a set with a new secret does not */
    assert_int_equal(EVP_set_default_properties(NULL, "fips=yes"), 1);
    sv_handler *same = sv_handler_new(&in, &old_set, &prev, replay, NULL, &err);
    sv_handler *changed = sv_handler_new(&in, &new_set, &prev, replay, NULL, &err);
    assert_int_equal(EVP_set_default_properties(NULL, ""), 1);
    assert_non_null(same);
    assert_null(changed);
    assert_int_equal(err.code, -EIO);
    /* a new cipher: each key is the one that cipher derives */
    sv_inbound_spec in128 = in;
    in128.ss_cipher = SV_SS_AES_128_GCM;
    sv_handler *rekeyed = sv_handler_new(&in128, &new_set, &prev, replay, NULL, &err);
    assert_non_null(rekeyed);
    ring = sv_ss_creds_ring(rekeyed->creds);
    assert_int_equal(sv_ss_password_to_key(in128.ss_cipher, s1, key), 0);
    assert_memory_equal(ring->keys[1], key, 16);
    sv_handler_unref(same);
    sv_handler_unref(rekeyed);
    sv_handler_unref(elsewhere);
    sv_handler_unref(now);
    sv_handler_unref(was);
    sv_replay_ref_unref(replay);
}

/* ---- client IP hints across a restart (issue 13) ------------------------------------------- */

/* Inbound ss1 on f->port for the users @p ids (secrets "secret-<id>"). */
static void hints_spec(fx *f, sv_user *users, char (*secrets)[16], const uint64_t *ids, size_t n)
{
    fx_spec(f, true, 0);
    for (size_t i = 0; i < n; i++) {
        snprintf(secrets[i], sizeof secrets[i], "secret-%llu", (unsigned long long)ids[i]);
        users[i] = (sv_user){.id = ids[i], .secret = secrets[i]};
    }
    f->sets[0] = (sv_user_set){.tag = "u", .users = users, .n_users = n};
}

static sv_ip_hint ip_hint(const char *inbound, const char *ip4, uint64_t user, uint32_t age)
{
    sv_ip_hint h = {.user = user, .age_s = age};
    snprintf(h.inbound, sizeof h.inbound, "%s", inbound);
    h.ip[10] = h.ip[11] = 0xff;
    assert_int_equal(inet_pton(AF_INET, ip4, h.ip + 12), 1);
    return h;
}

static void hints_are_given_to_every_worker_and_come_back_by_user(void **state)
{
    fx *f = *state;
    sv_user users[3];
    char secrets[3][16];
    sv_error err = {0};
    hints_spec(f, users, secrets, (const uint64_t[]){1, 2, 3}, 3);
    assert_int_equal(sv_apply(f->sv, &f->spec, NULL, NULL, &err), 0);
    sv_ip_hint in[] = {
        ip_hint("ss1", "10.0.0.1", 2, 10),
        ip_hint("ss1", "10.0.0.2", 9, 10),              /* no such user */
        ip_hint("ss1", "10.0.0.3", 3, SV_IP_HINT_TTL_S), /* expired */
        ip_hint("nope", "10.0.0.4", 1, 10),             /* no such inbound */
        ip_hint("ss1", "10.0.0.5", 3, 20),
    };
    assert_int_equal(sv_hints_import(f->sv, in, 5), 2);
    sv_ip_hint *out = NULL;
    long n = sv_hints_export(f->sv, &out);
    assert_int_equal(n, 2); /* both workers hold both: one row per IP */
    assert_string_equal(out[0].inbound, "ss1"); /* the most recent first */
    assert_memory_equal(out[0].ip, in[0].ip, 16);
    assert_int_equal(out[0].user, 2);
    assert_true(out[0].age_s >= 10 && out[0].age_s <= 12);
    assert_memory_equal(out[1].ip, in[4].ip, 16);
    assert_int_equal(out[1].user, 3);
    assert_true(out[1].age_s >= 20 && out[1].age_s <= 22);
    /* the next start lists the users in another order and no longer has user 2 */
    sv_user users2[2];
    char secrets2[2][16];
    hints_spec(f, users2, secrets2, (const uint64_t[]){3, 1}, 2);
    assert_int_equal(sv_apply(f->sv, &f->spec, NULL, NULL, &err), 0);
    assert_int_equal(sv_hints_import(f->sv, out, (size_t)n), 1); /* user 3's, at its new index */
    free(out);
    out = NULL;
    n = sv_hints_export(f->sv, &out);
    assert_int_equal(n, 1);
    assert_memory_equal(out[0].ip, in[4].ip, 16);
    assert_int_equal(out[0].user, 3);
    free(out);
    /* user 3 removed while its hint is in the tables: no longer given */
    hints_spec(f, users2, secrets2, (const uint64_t[]){1, 4}, 2);
    assert_int_equal(sv_apply(f->sv, &f->spec, NULL, NULL, &err), 0);
    out = NULL;
    assert_int_equal(sv_hints_export(f->sv, &out), 0);
    assert_null(out);
    /* at most SV_IP_HINTS_PER_INBOUND, the most recent */
    size_t many = SV_IP_HINTS_PER_INBOUND + 100;
    sv_ip_hint *v = calloc(many, sizeof *v);
    assert_non_null(v);
    char ip[32];
    for (size_t i = 0; i < many; i++) {
        snprintf(ip, sizeof ip, "10.1.%zu.%zu", i >> 8, i & 255);
        uint32_t age = i < 100 ? 3000 : (uint32_t)(i % 2000); /* the first 100 the oldest */
        v[i] = ip_hint("ss1", ip, 1 + (i & 1) * 3, age);      /* users 1 and 4 */
    }
    assert_int_equal(sv_hints_import(f->sv, v, many), SV_IP_HINTS_PER_INBOUND);
    free(v);
    out = NULL;
    n = sv_hints_export(f->sv, &out);
    assert_true(n > 0 && n <= (long)SV_IP_HINTS_PER_INBOUND); /* set-associative: a few miss */
    for (long i = 0; i < n; i++)
        assert_true(out[i].age_s < 2000 + 2); /* none of the oldest */
    free(out);
    sv_shutdown(f->sv, 0);
    assert_int_equal(sv_hints_export(f->sv, &out), -ESHUTDOWN);
    assert_int_equal(sv_hints_import(f->sv, in, 1), -ESHUTDOWN);
}

int main(void)
{
    alarm(60); /* bounded: a lost event must not hang the suite */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(apply_returns_once_every_worker_adopted_the_plane, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_failed_message_allocation_fails_the_apply_not_a_worker,
                                        setup, teardown),
        cmocka_unit_test(rebuilt_handler_reuses_unchanged_users_only),
        cmocka_unit_test_setup_teardown(hints_are_given_to_every_worker_and_come_back_by_user,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
