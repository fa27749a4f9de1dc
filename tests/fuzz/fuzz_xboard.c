/*
 * Fuzz harness: what an Xboard panel sends over its node channel and in its handshake answer
 * (panel/xboard.c, issue 14; PROTOCOLS-2.md §6) and in its machine mode answer (PANEL.md §1.1).
 * The input is one message, run through the event parser (node mode, and machine mode with no
 * node type), the handshake parser and the machine/nodes parser.
 * Checks: results are 0 or negative with a message; a parsed event's data matches its kind
 * (a config has a port and a protocol, user lists hold at most PN_USERS_MAX users with unique
 * ids and secrets, removed ids are unique and positive, a sync.nodes set is sorted by unique
 * positive ids within PN_XB_MACHINE_NODES_MAX); everything is zeroed after an error;
 * a handshake URL is ws:// or wss://; a machine list is sorted by unique positive ids, has
 * at most PN_XB_MACHINE_NODES_MAX nodes with non-empty types, intervals within 0..86400, and is
 * zeroed after an error.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "panel/xboard.h"
#include "tests/fuzz/fuzz.h"

static void check_users(const pn_users *u)
{
    FUZZ_CHECK(u->n <= PN_USERS_MAX);
    for (size_t i = 0; i < u->n; i++) {
        FUZZ_CHECK(u->users[i].uuid != NULL && u->users[i].id > 0);
        for (size_t k = 0; k < i; k++)
            FUZZ_CHECK(u->users[k].id != u->users[i].id);
    }
}

/* A machine's node set (a machine/nodes answer or a sync.nodes event): bounded, sorted by
 * unique positive ids, every type non-empty. */
static void check_nodes(const pn_xb_machine *m)
{
    FUZZ_CHECK(m->n <= PN_XB_MACHINE_NODES_MAX && (m->n == 0 || m->nodes != NULL));
    for (size_t i = 0; i < m->n; i++)
        FUZZ_CHECK(m->nodes[i].id > 0 && m->nodes[i].type[0] != '\0' &&
                   (i == 0 || m->nodes[i].id > m->nodes[i - 1].id));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 20))
        return 0;
    const char *msg = (const char *)data;
    sv_error err = {0};
    pn_xb_event ev;
    int rc = pn_xb_event_parse(msg, size, "shadowsocks", &ev, &err);
    FUZZ_CHECK(rc <= 0);
    if (rc != 0) {
        FUZZ_CHECK(err.msg[0] != '\0' && ev.users.users == NULL && ev.ids == NULL);
        FUZZ_CHECK(ev.node.protocol == NULL && ev.config_body == NULL);
    } else {
        if (ev.kind == PN_XB_CONFIG) /* with the body the store keeps (issue 14) */
            FUZZ_CHECK(ev.node.server_port > 0 && ev.node.protocol != NULL &&
                       ev.config_body != NULL && ev.config_len == strlen(ev.config_body));
        FUZZ_CHECK(ev.kind == PN_XB_CONFIG || ev.config_body == NULL);
        if (ev.kind == PN_XB_USERS || ev.kind == PN_XB_DELTA)
            check_users(&ev.users);
        FUZZ_CHECK(ev.kind == PN_XB_DELTA || (ev.ids == NULL && ev.n_ids == 0));
        for (size_t i = 0; i < ev.n_ids; i++)
            FUZZ_CHECK(ev.ids[i] > 0 && (i == 0 || ev.ids[i] > ev.ids[i - 1]));
        FUZZ_CHECK(strlen(ev.message) < sizeof ev.message);
    }
    FUZZ_CHECK(ev.kind == PN_XB_NODES || (ev.nodes.nodes == NULL && ev.nodes.n == 0));
    check_nodes(&ev.nodes);
    pn_xb_event_free(&ev);
    /* machine mode: no node type assumed (the event names its node) */
    rc = pn_xb_event_parse(msg, size, NULL, &ev, &err);
    FUZZ_CHECK(rc <= 0);
    FUZZ_CHECK(rc == 0 || (ev.nodes.nodes == NULL && ev.node.protocol == NULL));
    FUZZ_CHECK(rc != 0 || ev.kind != PN_XB_CONFIG || ev.node.protocol != NULL);
    check_nodes(&ev.nodes);
    pn_xb_event_free(&ev);
    char *url = NULL;
    rc = pn_xb_parse_handshake(msg, size, &url, &err);
    FUZZ_CHECK(rc <= 0);
    FUZZ_CHECK(rc == 0 || url == NULL);
    FUZZ_CHECK(url == NULL || strncmp(url, "ws://", 5) == 0 || strncmp(url, "wss://", 6) == 0);
    free(url);
    pn_xb_machine m;
    rc = pn_xb_parse_machine(msg, size, &m, &err);
    FUZZ_CHECK(rc <= 0);
    FUZZ_CHECK(rc == 0 || (m.nodes == NULL && m.n == 0));
    FUZZ_CHECK(m.push_interval <= 86400 && m.pull_interval <= 86400);
    check_nodes(&m);
    pn_xb_machine_free(&m);
    return 0;
}
