/*
 * Unit tests of the protocol-core seam's shape (supervisor/proto/proto.h, proto_ext.h): every
 * core the runtime registers (sv_proto_ops_for, and gRPC around them) fills the core interface,
 * offers exactly the extensions it has, and fills every required member of each extension it
 * offers; a capability it has not is NULL, so the runtime's query says "no".
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "supervisor/plane.h"
#include "supervisor/transport/grpc.h"

/* One core and the capabilities it is expected to offer (bit 1 << SV_PROTO_CAP_*). */
typedef struct core_case {
    const char *what;
    const sv_proto_ops *ops;
    unsigned caps;
} core_case;

#define CAP(c) (1u << SV_PROTO_CAP_##c)

static const sv_proto_ops *core_of(enum sv_inbound_protocol protocol, bool mux)
{
    sv_inbound_spec in = {.protocol = protocol};
    in.ws.mux = mux;
    const sv_proto_ops *ops = sv_proto_ops_for(&in);
    assert_non_null(ops);
    return ops;
}

/* The required members of @p ops's core interface are there. */
static void check_core(const core_case *k)
{
    const sv_proto_ops *o = k->ops;
    assert_non_null(o->name);
    assert_non_null(o->creds_new);
    assert_non_null(o->creds_free);
    assert_true(o->state_size > 0);
    assert_non_null(o->init);
    assert_non_null(o->deinit);
    assert_non_null(o->feed);
    assert_non_null(o->frame);
    assert_non_null(o->frame_max);
}

/* Every extension @p k offers has its required members; it offers those of k->caps only. */
static void check_exts(const core_case *k)
{
    const sv_proto_ops *o = k->ops;
    for (unsigned cap = 0; cap < SV_PROTO_CAP_COUNT; cap++) {
        bool want = (k->caps & (1u << cap)) != 0;
        if ((sv_proto_ext(o, cap) != NULL) != want)
            fail_msg("%s: capability %u %s", k->what, cap, want ? "missing" : "unexpected");
    }
    if (sv_proto_reload(o) != NULL)
        assert_non_null(sv_proto_reload(o)->creds_new_from);
    if (sv_proto_replay(o) != NULL)
        assert_non_null(sv_proto_replay(o)->attach_replay);
    if (sv_proto_clock(o) != NULL)
        assert_non_null(sv_proto_clock(o)->set_time);
    if (sv_proto_guide(o) != NULL) {
        assert_non_null(sv_proto_guide(o)->set_guide);
        assert_non_null(sv_proto_guide(o)->scan);
        assert_non_null(sv_proto_guide(o)->scan_result);
        /* a guided core's scan answer waits for the next feed(): it must say so */
        assert_non_null(sv_proto_backlog(o));
    }
    if (sv_proto_backlog(o) != NULL)
        assert_non_null(sv_proto_backlog(o)->more); /* queued is optional */
    if (sv_proto_datagram(o) != NULL)
        assert_non_null(sv_proto_datagram(o)->frame_datagram);
    if (sv_proto_end(o) != NULL)
        assert_non_null(sv_proto_end(o)->frame_end);
    if (sv_proto_direct(o) != NULL)
        assert_non_null(sv_proto_direct(o)->direct);
}

static void proto_caps__every_core__fills_what_it_offers(void **state)
{
    (void)state;
    const core_case cases[] = {
        {"shadowsocks", core_of(SV_INBOUND_SHADOWSOCKS, false),
         CAP(RELOAD) | CAP(REPLAY) | CAP(GUIDE) | CAP(BACKLOG)},
        {"shadowsocks over Mux.Cool", core_of(SV_INBOUND_SHADOWSOCKS, true),
         CAP(REPLAY) | CAP(GUIDE) | CAP(BACKLOG) | CAP(END)},
        {"shadowsocks-2022", core_of(SV_INBOUND_SS2022, false), CAP(REPLAY) | CAP(CLOCK)},
        {"trojan", core_of(SV_INBOUND_TROJAN, false), CAP(DATAGRAM)},
        {"vless", core_of(SV_INBOUND_VLESS, false),
         CAP(BACKLOG) | CAP(DATAGRAM) | CAP(END) | CAP(DIRECT)},
        {"vmess", core_of(SV_INBOUND_VMESS, false),
         CAP(REPLAY) | CAP(CLOCK) | CAP(DATAGRAM) | CAP(END)},
        {"grpc", &sv_grpc_ops, CAP(CLOCK) | CAP(BACKLOG) | CAP(DATAGRAM) | CAP(END)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_core(&cases[i]);
        check_exts(&cases[i]);
    }
    /* only gRPC holds a stream's output back (its HTTP/2 windows) */
    assert_non_null(sv_proto_backlog(&sv_grpc_ops)->queued);
    assert_null(sv_proto_backlog(core_of(SV_INBOUND_VLESS, false))->queued);
}

/* The runtime's helpers answer "nothing" for a core without the capability: no backlog, no
 * held bytes, no direct copy. */
static void proto_caps__absent_capability__helpers_say_none(void **state)
{
    (void)state;
    const sv_proto_ops *trojan = core_of(SV_INBOUND_TROJAN, false);
    uint8_t st[1] = {0};
    assert_false(sv_proto_more(trojan, st));
    assert_int_equal(sv_proto_queued(trojan, st, 1), 0);
    assert_int_equal(sv_proto_direct_bits(trojan, st), 0);
    assert_null(sv_proto_guide(trojan));
    assert_null(sv_proto_end(trojan));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(proto_caps__every_core__fills_what_it_offers),
        cmocka_unit_test(proto_caps__absent_capability__helpers_say_none),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
