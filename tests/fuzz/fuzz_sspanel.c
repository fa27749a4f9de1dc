/*
 * Fuzz harness: what an SSPanel-UIM mod_mu panel sends back (panel/sspanel.c, issue 14). The
 * first byte picks a status class and a node sort for the users parser; the rest is the body,
 * run through the report acknowledgement check and, when it is JSON, the node-info and users
 * parsers (users both with the sort the node answer gave and with the picked one).
 * Checks: results are 0 or negative with a message; a parsed node has a port, a protocol and
 * the configured intervals; a parsed user list holds at most PN_USERS_MAX users with non-NULL
 * secrets, unique ids and limits within their bounds; the outputs are zeroed on failure.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "panel/sspanel.h"
#include "tests/fuzz/fuzz.h"

static void check_users(const json_t *j, const pn_sspanel_meta *meta)
{
    sv_error err = {0};
    pn_users users;
    pn_alive_count *alive = NULL;
    size_t n_alive = 0, skipped = 0;
    int rc = pn_sspanel_parse_users(j, meta, &users, &skipped, &alive, &n_alive, &err);
    FUZZ_CHECK(rc <= 0);
    if (rc != 0) {
        FUZZ_CHECK(err.msg[0] != '\0' && users.n == 0 && users.users == NULL);
        FUZZ_CHECK(alive == NULL && n_alive == 0 && skipped == 0);
        return;
    }
    FUZZ_CHECK(users.n <= PN_USERS_MAX);
    for (size_t i = 0; i < users.n; i++) {
        FUZZ_CHECK(users.users[i].uuid != NULL && users.users[i].uuid[0] != '\0');
        FUZZ_CHECK(users.users[i].id > 0);
        FUZZ_CHECK(users.users[i].speed_limit <= PN_SSPANEL_SPEED_MAX);
        FUZZ_CHECK(users.users[i].device_limit <= PN_SSPANEL_IPLIMIT_MAX);
        for (size_t k = 0; k < i; k++)
            FUZZ_CHECK(users.users[k].id != users.users[i].id);
    }
    FUZZ_CHECK(n_alive <= PN_USERS_MAX);
    free(alive);
    pn_users_free(&users);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1u << 20))
        return 0;
    static const long statuses[] = {200, 201, 304, 400, 401, 404, 500, 502};
    static const int sorts[] = {0, 1, 11, 14};
    long status = statuses[data[0] % 8];
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    sv_error err = {0};
    int rc = pn_sspanel_check_ack(status, body, len, &err);
    FUZZ_CHECK(rc == 0 || (rc == -EPROTO && err.msg[0] != '\0'));
    FUZZ_CHECK(rc != 0 || (status >= 200 && status < 300));
    FUZZ_CHECK(strlen(err.msg) < sizeof err.msg);
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    if (j == NULL)
        return 0;
    pn_sspanel_meta meta;
    pn_node node;
    rc = pn_sspanel_parse_node(j, 30, 90, &meta, &node, &err);
    FUZZ_CHECK(rc <= 0);
    if (rc == 0) {
        FUZZ_CHECK(node.server_port > 0 && node.protocol != NULL);
        FUZZ_CHECK(node.pull_interval == 30 && node.push_interval == 90);
        FUZZ_CHECK(meta.sort == 0 || meta.sort == 1 || meta.sort == 11 || meta.sort == 14);
        FUZZ_CHECK(meta.sort > 1 || node.cipher != NULL);
        pn_node_free(&node);
        check_users(j, &meta);
    } else {
        FUZZ_CHECK(err.msg[0] != '\0' && node.protocol == NULL && meta.sort == 0);
    }
    pn_route *routes = NULL;
    size_t n_routes = 0, skipped = 0;
    rc = pn_sspanel_parse_rules(j, &routes, &n_routes, &skipped, &err);
    FUZZ_CHECK(rc <= 0);
    FUZZ_CHECK(rc == 0 || (routes == NULL && n_routes == 0));
    FUZZ_CHECK(n_routes <= PN_ROUTES_MAX);
    for (size_t i = 0; i < n_routes; i++)
        FUZZ_CHECK(routes[i].n_match == 1 && strncmp(routes[i].match[0], "regexp:", 7) == 0 &&
                   strcmp(routes[i].action, "block") == 0);
    pn_node holder = {.routes = routes, .n_routes = n_routes};
    pn_node_free(&holder);
    pn_sspanel_meta picked = {.sort = sorts[(data[0] >> 3) % 4], .speed_mbps = data[0] >> 5,
                              .method = "aes-128-gcm"};
    check_users(j, &picked);
    json_decref(j);
    return 0;
}
