/*
 * Fuzz harness: what an SSPanel-UIM mod_mu panel sends back (panel/sspanel.c, issue 14). The
 * first byte picks a status class and a node sort for the users parser; the rest is the body,
 * run through the report acknowledgement check and, when it is JSON, the node-info and users
 * parsers (users both with the sort the node answer gave and with the picked one).
 * Checks: results are 0 or negative with a message; a parsed node has a port, a protocol and
 * the configured intervals, and with enable_reality whole reality-opts (issue 11); a parsed
 * user list holds at most PN_USERS_MAX users with non-NULL secrets, unique ids and limits
 * within their bounds; the outputs are zeroed on failure; the users parser of the text
 * (issue 33: one entry at a time) accepts what the tree's parser accepts, as the same list,
 * and refuses what jansson refuses.
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

/* The text path (issue 33) against the tree's: the same outcome and the same list; a body
 * jansson refuses (@p j NULL) is refused. */
static void check_users_text(const char *body, size_t len, const json_t *j,
                             const pn_sspanel_meta *meta)
{
    sv_error err = {0};
    pn_users t, r = {0};
    pn_alive_count *ta = NULL, *ra = NULL;
    size_t tn = 0, rn = 0, ts = 0, rs = 0;
    int rc = pn_sspanel_parse_users_text(body, len, meta, &t, &ts, &ta, &tn, &err);
    FUZZ_CHECK(rc <= 0 && (rc == 0 || err.msg[0] != '\0'));
    FUZZ_CHECK(rc == 0 || (t.users == NULL && t.n == 0 && ta == NULL && tn == 0 && ts == 0));
    int ref = j != NULL ? pn_sspanel_parse_users(j, meta, &r, &rs, &ra, &rn, &err) : -EBADMSG;
    FUZZ_CHECK((rc == 0) == (ref == 0));
    if (rc == 0) {
        FUZZ_CHECK(pn_users_equal(&t, &r) && ts == rs && tn == rn);
        FUZZ_CHECK(tn == 0 || memcmp(ta, ra, tn * sizeof *ta) == 0);
    }
    pn_users_free(&t);
    pn_users_free(&r);
    free(ta);
    free(ra);
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
    pn_sspanel_meta picked = {.sort = sorts[(data[0] >> 3) % 4], .speed_mbps = data[0] >> 5,
                              .method = "aes-128-gcm"};
    check_users_text(body, len, j, &picked);
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
        const pn_reality *r = &node.reality; /* enable_reality: reality-opts whole or refused */
        FUZZ_CHECK(r->target == NULL || (node.tls == 2 && r->server_names != NULL &&
                                         r->short_ids != NULL && r->private_key != NULL &&
                                         strlen(r->private_key) == 43 && r->xver <= 2));
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
    check_users(j, &picked);
    json_decref(j);
    return 0;
}
