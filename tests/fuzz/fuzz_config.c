/*
 * Fuzz harness: the agent config parser (agent/agent_config.c) and, for configs it accepts, the
 * inline panel bodies (panel/model.c) and their lowering (agent/lower.c).
 * Checks: a refusal has a negative code, a message and leaves the config empty; an accepted
 * config has 1..AG_CONFIG_NODES_MAX nodes with non-empty tags and exactly one source per body;
 * a lowered fleet has one inbound and one user set per node, the two shared outbounds, and only
 * rules with matchers scoped to one node and sent to "block" (or, dns routes, to "direct" with
 * a valid DNS server); user labels are the decimal ids;
 * parsing is deterministic.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent_config.h"
#include "agent/lower.h"
#include "panel/model.h"
#include "supervisor/util/log.h"
#include "tests/fuzz/fuzz.h"

static void check_spec(const sv_spec *s, const ag_fleet *f)
{
    FUZZ_CHECK(s->n_inbounds == f->n && s->n_user_sets == f->n);
    FUZZ_CHECK(s->n_outbounds == 2 && strcmp(s->route.default_outbound, "direct") == 0);
    for (size_t i = 0; i < f->n; i++) {
        FUZZ_CHECK(strcmp(s->inbounds[i].tag, f->nodes[i].tag) == 0);
        FUZZ_CHECK(s->inbounds[i].bind.port != 0);
        FUZZ_CHECK(s->user_sets[i].n_users == f->nodes[i].users.n);
        for (size_t k = 0; k < s->user_sets[i].n_users; k++) /* no label: never the uuid */
            FUZZ_CHECK(s->user_sets[i].users[k].label == NULL);
    }
    for (size_t i = 0; i < s->route.n_rules; i++) {
        const sv_route_rule *r = &s->route.rules[i];
        FUZZ_CHECK(r->n_matchers > 0 && r->n_inbounds == 1);
        /* a block route: an audit rule to "block"; a dns route (issue 13): to "direct" with a
         * valid server */
        FUZZ_CHECK(r->dns_server == NULL ? strcmp(r->outbound, "block") == 0 && r->audit
                                         : strcmp(r->outbound, "direct") == 0 && !r->audit &&
                                               sv_dns_server_valid(r->dns_server));
        for (size_t m = 0; m < r->n_matchers; m++) /* issue 3: no regex that matches "" */
            FUZZ_CHECK(r->matchers[m].kind != SV_MATCH_REGEX ||
                       ag_regex_check(r->matchers[m].text, NULL, 0) == 0);
    }
}

/* Parse every inline body of cfg and lower the nodes that have both. */
static void lower_inline(const ag_config *cfg)
{
    ag_fleet f = {.nodes = calloc(cfg->n_nodes, sizeof *f.nodes)};
    FUZZ_CHECK(f.nodes != NULL);
    for (size_t i = 0; i < cfg->n_nodes; i++) {
        const ag_node_config *nc = &cfg->nodes[i];
        ag_node_state *st = &f.nodes[f.n];
        sv_error err = {0};
        if (nc->panel.node == NULL || nc->panel.users == NULL)
            continue;
        if (pn_node_parse(nc->panel.node, "shadowsocks", PN_PARSE_STRICT, &st->node, &err) != 0) {
            FUZZ_CHECK(err.msg[0] != '\0' && st->node.protocol == NULL);
            continue;
        }
        if (pn_users_parse(nc->panel.users, PN_PARSE_STRICT, &st->users, &err) != 0) {
            FUZZ_CHECK(err.msg[0] != '\0' && st->users.n == 0);
            pn_node_free(&st->node);
            continue;
        }
        st->tag = strdup(nc->tag);
        st->listen = nc->listen != NULL ? strdup(nc->listen) : NULL;
        FUZZ_CHECK(st->tag != NULL);
        f.n++;
    }
    sv_spec spec;
    sv_error err = {0};
    if (ag_lower_fleet(&f, &spec, &err) == 0) {
        check_spec(&spec, &f);
        sv_spec_free(&spec);
    } else {
        FUZZ_CHECK(err.msg[0] != '\0' && spec.inbounds == NULL);
    }
    ag_fleet_free(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ag_config cfg, again;
    sv_error err = {0}, err2 = {0};
    sv_log_threshold = -1; /* lowering warns about skipped routes */
    int rc = ag_config_parse((const char *)data, size, "/base", &cfg, &err);
    int rc2 = ag_config_parse((const char *)data, size, "/base", &again, &err2);
    FUZZ_CHECK(rc == rc2 && strcmp(err.msg, err2.msg) == 0);
    ag_config_free(&again);
    if (rc != 0) {
        FUZZ_CHECK(rc < 0 && err.msg[0] != '\0' && cfg.nodes == NULL && cfg.n_nodes == 0);
        return 0;
    }
    FUZZ_CHECK(cfg.n_nodes >= 1 && cfg.n_nodes <= AG_CONFIG_NODES_MAX);
    for (size_t i = 0; i < cfg.n_nodes; i++) {
        const ag_node_config *nc = &cfg.nodes[i];
        FUZZ_CHECK(nc->tag != NULL && nc->tag[0] != '\0' && strlen(nc->tag) <= 64);
        FUZZ_CHECK((nc->panel.node == NULL) != (nc->panel.node_file == NULL));
        FUZZ_CHECK((nc->panel.users == NULL) != (nc->panel.users_file == NULL));
        FUZZ_CHECK(nc->panel.node_file == NULL || nc->panel.node_file[0] == '/');
    }
    lower_inline(&cfg);
    ag_config_free(&cfg);
    return 0;
}
