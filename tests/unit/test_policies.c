/*
 * Removal and drain policies (issue 12 "Policies", seed 001 "policies") through a real
 * supervisor with worker threads: a VLESS inbound (plain TCP) on 127.0.0.1, the flows dialled
 * by `direct` to an "echo" listener the test holds itself on 127.0.0.1, so it sees each flow's
 * remote end. Checks:
 *  - a removed user's live flow is kept (Keep), closed at once (Close), or closed after the
 *    grace (CloseAfter); another user's flow is never touched;
 *  - a replaced outbound version's flows likewise under the drain policy (default Keep), and
 *    under Close a dial still in flight fails when it completes (seed 000 "Guarded");
 *  - shutdown with hour-long grace timers pending returns at once and leaves no timer behind.
 * Loopback only; every wait is bounded.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "supervisor/supervisor.h"

#define UUID_1 "11111111-1111-4111-8111-111111111111"
#define UUID_2 "22222222-2222-4222-8222-222222222222"

typedef struct fx {
    uv_loop_t loop;
    sv_supervisor *sv;
    sv_spec spec;
    sv_inbound_spec in[1];
    sv_outbound_spec out[2];
    sv_user_set sets[1];
    sv_user users[2];
    uint16_t port;   /**< the inbound */
    int echo;        /**< the flows' destination: a listener the test accepts on */
    uint16_t echo_port;
} fx;

typedef struct flow {
    int client, remote;
} flow;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* A listening socket on 127.0.0.1 (port the kernel's pick, written to @p port). */
static int listen_loopback(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 16), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static uint16_t free_port(void)
{
    uint16_t port;
    close(listen_loopback(&port));
    return port;
}

/* Run the control loop (grace timers live there) until @p fd is readable or @p ms pass.
 * @return true when readable. */
static bool wait_readable(fx *f, int fd, uint32_t ms)
{
    uint64_t end = now_ms() + ms;
    do {
        uv_run(&f->loop, UV_RUN_NOWAIT);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10) == 1)
            return true;
    } while (now_ms() < end);
    return false;
}

/* Read exactly @p n bytes from @p fd within 3 s. */
static void read_exact(fx *f, int fd, uint8_t *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        assert_true(wait_readable(f, fd, 3000));
        ssize_t r = recv(fd, buf + got, n - got, 0);
        assert_true(r > 0);
        got += (size_t)r;
    }
}

/* The flow still relays: a byte from the remote reaches the client. */
static void expect_alive(fx *f, const flow *fl)
{
    uint8_t b = 0;
    assert_int_equal(send(fl->remote, "z", 1, MSG_NOSIGNAL), 1);
    read_exact(f, fl->client, &b, 1);
    assert_int_equal(b, 'z');
}

/* The flow has ended: within @p ms the client sees its end (EOF or a reset). */
static void expect_closed(fx *f, const flow *fl, uint32_t ms)
{
    uint8_t buf[64];
    uint64_t end = now_ms() + ms;
    for (;;) {
        assert_true(now_ms() < end);
        if (!wait_readable(f, fl->client, (uint32_t)(end - now_ms())))
            continue;
        ssize_t r = recv(fl->client, buf, sizeof buf, 0);
        if (r <= 0)
            return;
    }
}

static void flow_close(flow *fl)
{
    close(fl->client);
    close(fl->remote);
}

/* Connect to the inbound as user @p uuid and send a VLESS request for 127.0.0.1:@p port with
 * "hi" as its first bytes. @return the client's socket. */
static int send_request(fx *f, const char *uuid, uint16_t port)
{
    int client;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(f->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    /* the workers start listening on their own loops, just after the apply returns */
    uint64_t end = now_ms() + 3000;
    for (;;) {
        client = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(client, (struct sockaddr *)&a, sizeof a) == 0)
            break;
        close(client);
        assert_true(now_ms() < end);
        usleep(10 * 1000);
    }
    uint8_t req[64], *p = req;
    *p++ = 0; /* version */
    for (const char *c = uuid; *c != '\0'; c += (*c == '-') ? 1 : 2) {
        if (*c == '-')
            continue;
        unsigned v;
        sscanf(c, "%2x", &v);
        *p++ = (uint8_t)v;
    }
    *p++ = 0; /* no addons */
    *p++ = 1; /* TCP */
    *p++ = (uint8_t)(port >> 8);
    *p++ = (uint8_t)port;
    *p++ = 1; /* IPv4 */
    *p++ = 127, *p++ = 0, *p++ = 0, *p++ = 1;
    memcpy(p, "hi", 2);
    p += 2;
    assert_int_equal(send(client, req, (size_t)(p - req), MSG_NOSIGNAL), p - req);
    return client;
}

/* Open a VLESS flow as user @p uuid to the echo listener and accept its remote end. */
static flow open_flow(fx *f, const char *uuid)
{
    flow fl;
    fl.client = send_request(f, uuid, f->echo_port);
    assert_true(wait_readable(f, f->echo, 3000));
    fl.remote = accept(f->echo, NULL, NULL);
    assert_true(fl.remote >= 0);
    uint8_t hi[2];
    read_exact(f, fl.remote, hi, 2);
    assert_memory_equal(hi, "hi", 2);
    assert_int_equal(send(fl.remote, "ok", 2, MSG_NOSIGNAL), 2);
    uint8_t resp[4];
    read_exact(f, fl.client, resp, 4); /* VLESS response header (version, no addons) + "ok" */
    assert_memory_equal(resp + 2, "ok", 2);
    return fl;
}

static void fx_spec(fx *f)
{
    f->in[0] = (sv_inbound_spec){.tag = "v1", .bind = {"127.0.0.1", f->port},
                                 .protocol = SV_INBOUND_VLESS, .users = "u",
                                 .allow_private = true};
    f->out[0] = (sv_outbound_spec){.tag = "direct", .kind = SV_OUTBOUND_DIRECT};
    f->out[1] = (sv_outbound_spec){.tag = "direct2", .kind = SV_OUTBOUND_DIRECT};
    f->users[0] = (sv_user){.id = 1, .secret = UUID_1};
    f->users[1] = (sv_user){.id = 2, .secret = UUID_2};
    f->sets[0] = (sv_user_set){.tag = "u", .users = f->users, .n_users = 2};
    f->spec = (sv_spec){.inbounds = f->in, .n_inbounds = 1, .outbounds = f->out,
                        .n_outbounds = 2, .user_sets = f->sets, .n_user_sets = 1,
                        .route = {.default_outbound = "direct"}};
}

static void apply(fx *f)
{
    sv_error err = {0};
    assert_int_equal(sv_apply(f->sv, &f->spec, NULL, NULL, &err), 0);
}

static int setup(void **state)
{
    static fx f;
    memset(&f, 0, sizeof f);
    assert_int_equal(uv_loop_init(&f.loop), 0);
    sv_options opts = {.workers = 2};
    assert_int_equal(sv_supervisor_new(&f.loop, &opts, &f.sv), 0);
    f.port = free_port();
    f.echo = listen_loopback(&f.echo_port);
    fx_spec(&f);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    sv_supervisor_free(f->sv);
    uv_run(&f->loop, UV_RUN_DEFAULT); /* returns at once: no timer is left running */
    assert_int_equal(uv_loop_close(&f->loop), 0);
    close(f->echo);
    return 0;
}

/* ---- user removal ------------------------------------------------------------------------- */

/* Remove user 1 under @p pol (on the inbound when @p on_inbound, else supervisor-wide); user 2's
 * flow must stay whatever happens to user 1's. */
static void remove_user_under(fx *f, sv_policy pol, bool on_inbound, flow *f1, flow *f2)
{
    if (on_inbound)
        f->in[0].user_removal = pol;
    else
        f->spec.user_removal = pol;
    apply(f);
    *f1 = open_flow(f, UUID_1);
    *f2 = open_flow(f, UUID_2);
    sv_error err = {0};
    assert_int_equal(sv_remove_user(f->sv, "u", 1, &err), 1);
}

static void a_removed_users_flow_is_closed_by_default(void **state)
{
    fx *f = *state;
    flow f1, f2;
    remove_user_under(f, (sv_policy){0}, false, &f1, &f2);
    expect_closed(f, &f1, 3000);
    expect_alive(f, &f2);
    flow_close(&f1);
    flow_close(&f2);
}

static void a_removed_users_flow_is_kept_under_keep(void **state)
{
    fx *f = *state;
    flow f1, f2;
    f->spec.user_removal = (sv_policy){.kind = SV_POLICY_CLOSE}; /* the inbound's wins */
    remove_user_under(f, (sv_policy){.kind = SV_POLICY_KEEP}, true, &f1, &f2);
    usleep(300 * 1000);
    expect_alive(f, &f1);
    expect_alive(f, &f2);
    flow_close(&f1);
    flow_close(&f2);
}

static void a_removed_users_flow_is_closed_after_the_grace(void **state)
{
    fx *f = *state;
    flow f1, f2;
    uint64_t t0 = now_ms();
    remove_user_under(f, (sv_policy){.kind = SV_POLICY_CLOSE_AFTER, .grace_ms = 1000}, true,
                      &f1, &f2);
    expect_alive(f, &f1); /* within the grace */
    expect_closed(f, &f1, 5000);
    assert_true(now_ms() - t0 >= 1000); /* not before the grace */
    expect_alive(f, &f2);
    flow_close(&f1);
    flow_close(&f2);
}

/* ---- drain -------------------------------------------------------------------------------- */

/* Open a flow on direct@v1, then replace direct (it becomes a blackhole: direct@v2). */
static flow replace_outbound_under(fx *f, sv_policy pol, bool on_outbound)
{
    apply(f);
    flow fl = open_flow(f, UUID_2);
    if (on_outbound)
        f->out[0].drain = pol;
    else
        f->spec.drain = pol;
    f->out[0].kind = SV_OUTBOUND_BLACKHOLE;
    sv_apply_report report = {0};
    sv_error err = {0};
    assert_int_equal(sv_apply(f->sv, &f->spec, NULL, &report, &err), 0);
    assert_int_equal(report.n_drained, 1);
    assert_string_equal(report.drained[0], "outbound direct@v1");
    sv_apply_report_free(&report);
    return fl;
}

static void a_replaced_outbounds_flow_is_kept_by_default(void **state)
{
    fx *f = *state;
    flow fl = replace_outbound_under(f, (sv_policy){0}, false);
    usleep(300 * 1000);
    expect_alive(f, &fl);
    flow_close(&fl);
}

static void a_replaced_outbounds_flow_is_closed_under_close(void **state)
{
    fx *f = *state;
    f->spec.drain = (sv_policy){.kind = SV_POLICY_KEEP}; /* the outbound's wins */
    flow fl = replace_outbound_under(f, (sv_policy){.kind = SV_POLICY_CLOSE}, true);
    expect_closed(f, &fl, 3000);
    flow_close(&fl);
}

static void a_replaced_outbounds_flow_is_closed_after_the_grace(void **state)
{
    fx *f = *state;
    uint64_t t0 = now_ms();
    flow fl = replace_outbound_under(
        f, (sv_policy){.kind = SV_POLICY_CLOSE_AFTER, .grace_ms = 1000}, false);
    expect_alive(f, &fl);
    expect_closed(f, &fl, 5000);
    assert_true(now_ms() - t0 >= 1000);
    flow_close(&fl);
}

/* Seed 000 "Guarded": a flow whose dial is still in flight when its version is closed fails
 * when the dial completes. The dial is held by a listener whose accept queue is full (the
 * kernel drops the SYN; the retransmission, a second later, finds room once the test accepted
 * the connection that filled it). */
static void a_dial_in_flight_fails_when_it_completes_on_a_closed_version(void **state)
{
    fx *f = *state;
    uint16_t late_port;
    int late = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(late, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(late, 0), 0); /* one connection fills the queue */
    assert_int_equal(getsockname(late, (struct sockaddr *)&a, &len), 0);
    late_port = ntohs(a.sin_port);
    int filler = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(filler, (struct sockaddr *)&a, sizeof a), 0);
    apply(f);
    flow fl = {.client = send_request(f, UUID_2, late_port), .remote = -1};
    usleep(300 * 1000); /* its SYN was dropped: the dial waits for the retransmission */
    f->out[0].drain = (sv_policy){.kind = SV_POLICY_CLOSE};
    f->out[0].kind = SV_OUTBOUND_BLACKHOLE;
    sv_apply_report report = {0};
    sv_error err = {0};
    assert_int_equal(sv_apply(f->sv, &f->spec, NULL, &report, &err), 0);
    assert_int_equal(report.n_drained, 1);
    sv_apply_report_free(&report);
    int first = accept(late, NULL, NULL); /* the filler's: room for the retransmitted SYN */
    assert_true(first >= 0);
    close(first);
    assert_true(wait_readable(f, late, 5000)); /* the dial completed, on the closed version */
    fl.remote = accept(late, NULL, NULL);
    assert_true(fl.remote >= 0);
    expect_closed(f, &fl, 3000);
    uint8_t buf[8];
    assert_true(wait_readable(f, fl.remote, 3000));
    assert_int_equal(recv(fl.remote, buf, sizeof buf, 0), 0); /* closed: not one byte relayed */
    flow_close(&fl);
    close(filler);
    close(late);
}

/* ---- shutdown ----------------------------------------------------------------------------- */

static void shutdown_ends_pending_grace_timers(void **state)
{
    fx *f = *state;
    sv_policy hour = {.kind = SV_POLICY_CLOSE_AFTER, .grace_ms = 3600u * 1000u};
    flow f1, f2;
    remove_user_under(f, hour, false, &f1, &f2);
    f->spec.drain = hour;
    f->out[0].kind = SV_OUTBOUND_BLACKHOLE;
    apply(f);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_true(uv_loop_alive(&f->loop)); /* the timers wait */
    uint64_t t0 = now_ms();
    sv_shutdown(f->sv, 0);
    uv_run(&f->loop, UV_RUN_NOWAIT); /* close callbacks */
    assert_false(uv_loop_alive(&f->loop)); /* no timer left to hold the loop */
    assert_true(now_ms() - t0 < 3000);
    expect_closed(f, &f1, 3000);
    expect_closed(f, &f2, 3000);
    flow_close(&f1);
    flow_close(&f2);
}

int main(void)
{
    alarm(60); /* bounded: a lost event must not hang the suite */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_removed_users_flow_is_closed_by_default, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_removed_users_flow_is_kept_under_keep, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_removed_users_flow_is_closed_after_the_grace, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_replaced_outbounds_flow_is_kept_by_default, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_replaced_outbounds_flow_is_closed_under_close, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_replaced_outbounds_flow_is_closed_after_the_grace,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            a_dial_in_flight_fails_when_it_completes_on_a_closed_version, setup, teardown),
        cmocka_unit_test_setup_teardown(shutdown_ends_pending_grace_timers, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
