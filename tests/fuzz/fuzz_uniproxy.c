/*
 * Fuzz harness: what a UniProxy panel sends back (panel/uniproxy.c, panel/model.c in the
 * non-strict mode used for HTTP answers). The first byte picks a status class; the rest is the
 * body, run through the report acknowledgement check, the error-envelope reader, and, when it
 * is JSON, the config, user and alivelist parsers.
 * Checks: results are 0 or negative with a message; a parsed user list holds at most
 * PN_USERS_MAX users with non-NULL uuids; a parsed node has a port; alivelist counts fit.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "panel/uniproxy.h"
#include "tests/fuzz/fuzz.h"

static void parse_bodies(const json_t *j)
{
    sv_error err = {0};
    pn_node node;
    int rc = pn_node_parse(j, "shadowsocks", 0, &node, &err);
    FUZZ_CHECK(rc <= 0);
    if (rc == 0) {
        FUZZ_CHECK(node.server_port > 0 && node.protocol != NULL);
        pn_node_free(&node);
    } else {
        FUZZ_CHECK(err.msg[0] != '\0');
    }
    pn_users users;
    rc = pn_users_parse(j, 0, &users, &err);
    FUZZ_CHECK(rc <= 0);
    if (rc == 0) {
        FUZZ_CHECK(users.n <= PN_USERS_MAX);
        for (size_t i = 0; i < users.n; i++)
            FUZZ_CHECK(users.users[i].uuid != NULL);
        pn_users_free(&users);
    }
    pn_alive_count *items = NULL;
    size_t n = 0;
    rc = pn_uniproxy_parse_alivelist(j, &items, &n, &err);
    FUZZ_CHECK(rc <= 0);
    FUZZ_CHECK(rc == 0 || (items == NULL && n == 0));
    FUZZ_CHECK(n <= PN_USERS_MAX);
    free(items);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1u << 20))
        return 0;
    static const long statuses[] = {200, 201, 204, 304, 400, 422, 500, 502};
    long status = statuses[data[0] % 8];
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    sv_error err = {0};
    int rc = pn_uniproxy_check_ack(status, body, len, &err);
    FUZZ_CHECK(rc == 0 || (rc == -EPROTO && err.msg[0] != '\0'));
    FUZZ_CHECK(rc != 0 || (status >= 200 && status < 300));
    FUZZ_CHECK(pn_uniproxy_error(status, body, len, &err) == -EPROTO);
    FUZZ_CHECK(strlen(err.msg) < sizeof err.msg);
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    if (j != NULL)
        parse_bodies(j);
    json_decref(j);
    return 0;
}
