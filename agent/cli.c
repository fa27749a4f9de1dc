/*
 * katana's command line: the command table, the help it prints, the usage errors, and the
 * built-in commands' argument parsing (see cli.h; katana(8) COMMANDS).
 */
#include "config.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "agent/cli.h"
#include "agent/cli_remote.h"
#include "agent/import.h"
#include "supervisor/util/closest.h"

/* The configuration file of the packages and of katana.service (katana(8) FILES): named when
 * -c is missing, since katana itself reads no file it is not given. */
#define PACKAGED_CONFIG "/etc/katana/config.json"

/* `katana help` order; one line per command (cli.h) */
static const ag_cli_cmd *const commands[] = {
    &ag_cli_run,
    &ag_cli_check,
    &ag_cli_import,
    &ag_cli_status,
    &ag_cli_top,
    &ag_cli_kill,
    &ag_cli_keygen,
    &ag_cli_version,
    &ag_cli_help,
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

/* ------------------------------------------------------------------------------------------ */
/* help and usage errors                                                                        */
/* ------------------------------------------------------------------------------------------ */

static const ag_cli_cmd *find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i]->name, name) == 0)
            return commands[i];
    return NULL;
}

/* The nearest command name to @p word, or NULL (sv_closest()). */
static const char *closest_command(const char *word)
{
    const char *names[N_COMMANDS];
    for (size_t i = 0; i < N_COMMANDS; i++)
        names[i] = commands[i]->name;
    return sv_closest(word, names, N_COMMANDS);
}

/* "usage: katana FORM" for the first form of @p usage, "       katana FORM" for the others. */
static void print_usage(FILE *f, const char *usage)
{
    const char *lead = "usage: ";
    while (*usage != '\0') {
        size_t n = strcspn(usage, "\n");
        fprintf(f, "%skatana %.*s\n", lead, (int)n, usage);
        lead = "       ";
        usage += n + (usage[n] == '\n');
    }
}

/* The command list, as `katana help` prints it. */
static void print_overview(FILE *f)
{
    int width = 0;
    for (size_t i = 0; i < N_COMMANDS; i++) {
        int n = (int)strlen(commands[i]->name);
        width = n > width ? n : width;
    }
    fputs("usage: katana COMMAND [ARG]...\n\n"
          "katana serves the proxy nodes of this host: each node's settings and users come\n"
          "from a panel (V2Board/Xboard, SSPanel) or from a local file.\n\n"
          "Commands:\n", f);
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-*s  %s\n", width, commands[i]->name, commands[i]->summary);
    fputs("\n'katana help COMMAND' or 'katana COMMAND --help' prints a command's help.\n"
          "The commands are described in katana(8), the configuration file in katana.json(5).\n",
          f);
}

static void print_help(FILE *f, const ag_cli_cmd *c)
{
    print_usage(f, c->usage);
    fprintf(f, "\n%s", c->help);
}

int ag_cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "katana%s%s: ", cmd != NULL ? " " : "", cmd != NULL ? cmd : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    const ag_cli_cmd *c = cmd != NULL ? find_command(cmd) : NULL;
    if (c == NULL) {
        fputs("usage: katana COMMAND [ARG]...\nTry 'katana help' for the commands.\n", stderr);
        return AG_CLI_USAGE;
    }
    print_usage(stderr, c->usage);
    fprintf(stderr, "Try 'katana help %s' for more.\n", c->name);
    return AG_CLI_USAGE;
}

/* The long option of @p longs named by "--NAME[=...]" @p arg whose val is @p val, or NULL. */
static const struct option *long_named(const char *arg, int val, const struct option *longs)
{
    if (strncmp(arg, "--", 2) != 0 || longs == NULL)
        return NULL;
    size_t n = strcspn(arg + 2, "=");
    for (const struct option *o = longs; o->name != NULL; o++)
        if (o->val == val && strlen(o->name) == n && strncmp(o->name, arg + 2, n) == 0)
            return o;
    return NULL;
}

int ag_cli_bad_option(const char *cmd, int ch, char **argv, const struct option *longs)
{
    /* glibc: optopt 0 for an unknown long option, else the option's val; the option's word is
     * argv[optind - 1] when it was a long one (a short one may sit inside a cluster) */
    const char *arg = optind > 0 ? argv[optind - 1] : "";
    if (optopt == 0 && strncmp(arg, "--", 2) == 0)
        return ag_cli_usage_error(cmd, "unknown option '%.*s'", (int)strcspn(arg, "="), arg);
    const struct option *o = long_named(arg, optopt, longs);
    if (o != NULL && ch == ':')
        return ag_cli_usage_error(cmd, "option '--%s' needs a value", o->name);
    if (o != NULL)
        return ag_cli_usage_error(cmd, "option '--%s' takes no value", o->name);
    if (ch == ':')
        return ag_cli_usage_error(cmd, "option '-%c' needs a value", optopt);
    if (optopt > ' ' && optopt < 127)
        return ag_cli_usage_error(cmd, "unknown option '-%c'", optopt);
    return ag_cli_usage_error(cmd, "unknown option '%s'", arg);
}

/* Whether -h or --help is among @p argv[1..] (before a "--"). */
static bool wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return true;
    return false;
}

/* ------------------------------------------------------------------------------------------ */
/* run, check                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* `-c FILE` / `--config FILE`, and `--offline` when @p offline is not NULL (check), after the
 * command word @p argv[0]. 0 with *path set, or AG_CLI_USAGE (reported). */
static int config_args(int argc, char **argv, const char **path, bool *offline)
{
    static const struct option run_longs[] = {{"config", required_argument, NULL, 'c'},
                                              {NULL, 0, NULL, 0}};
    static const struct option check_longs[] = {{"config", required_argument, NULL, 'c'},
                                                {"offline", no_argument, NULL, 'o'},
                                                {NULL, 0, NULL, 0}};
    const struct option *longs = offline != NULL ? check_longs : run_longs;
    const char *cmd = argv[0];
    int ch;
    *path = NULL;
    opterr = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, ":c:", longs, NULL)) != -1) {
        if (ch == 'o')
            *offline = true;
        else if (ch == 'c')
            *path = optarg;
        else
            return ag_cli_bad_option(cmd, ch, argv, longs);
    }
    if (optind < argc)
        return ag_cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    if (*path == NULL)
        return ag_cli_usage_error(cmd, "-c FILE is required: katana reads no configuration "
                                  "file by default (the packages install %s)", PACKAGED_CONFIG);
    if ((*path)[0] == '\0')
        return ag_cli_usage_error(cmd, "-c: the file name is empty");
    return 0;
}

static int run_main(int argc, char **argv)
{
    const char *path;
    int rc = config_args(argc, argv, &path, NULL);
    return rc != 0 ? rc : ag_cmd_run(path);
}

static int check_main(int argc, char **argv)
{
    const char *path;
    bool offline = false;
    int rc = config_args(argc, argv, &path, &offline);
    return rc != 0 ? rc : ag_cmd_check(path, offline);
}

const ag_cli_cmd ag_cli_run = {
    .name = "run", .main = run_main,
    .summary = "serve every node of a configuration file",
    .usage = "run -c FILE",
    .help =
    "Serve every node of FILE until SIGTERM or SIGINT (a graceful stop within shutdown_grace).\n"
    "SIGHUP reads FILE and the panels' data again and applies the changes live; SIGUSR1 logs\n"
    "each user's usage since the start. Logs go to stderr. A FILE katana refuses exits 1,\n"
    "naming the offending setting by its JSON path.\n\n"
    "Options:\n"
    "  -c, --config FILE  the configuration file (katana.json(5))\n\n"
    "Example:\n"
    "  katana run -c /etc/katana/config.json\n",
};

const ag_cli_cmd ag_cli_check = {
    .name = "check", .main = check_main,
    .summary = "validate a configuration file (and its panels' data) without serving",
    .usage = "check [--offline] -c FILE",
    .help =
    "Load FILE as 'katana run' would, without serving: parse it, fetch each node's settings\n"
    "and users from its panel once, build and validate the runtime configuration, and refuse\n"
    "what run would fail on at start (a listen address that is not this host's, a db.path\n"
    "directory that does not exist). Prints one line per node (protocol, port, users and\n"
    "security), then \"Configuration OK.\" and exits 0; or \"configuration invalid: REASON\" on\n"
    "stderr and exits 1. Listen ports another process already holds are warned about on\n"
    "stderr (\"warning: ...\", naming the process); they do not change the exit code.\n\n"
    "Options:\n"
    "  -c, --config FILE  the configuration file (katana.json(5))\n"
    "  --offline          contact no remote panel: check the file and its local nodes only\n\n"
    "Example:\n"
    "  katana check -c /etc/katana/config.json\n",
};

const ag_cli_cmd ag_cli_import = {
    .name = "import", .main = ag_import_main,
    .summary = "translate a V2bX, XrayR or Xboard-Node configuration into katana's",
    .usage = "import [--db PATH] v2bx|xrayr|xboard-node FILE",
    .help =
    "Write to stdout the katana configuration that serves the panel nodes of another agent's\n"
    "FILE: a V2bX config.json (v2bx), an XrayR config.yml (xrayr) or an Xboard-Node config.yml\n"
    "(xboard-node). Each setting katana has no equivalent for is named on stderr in one\n"
    "\"katana import: warning: ...\" line. Exits 1 when FILE cannot be read or holds no node\n"
    "katana serves.\n\n"
    "Options:\n"
    "  --db PATH  db.path of the result (default /var/lib/katana/katana.db)\n\n"
    "Example:\n"
    "  katana import xrayr /etc/XrayR/config.yml > /etc/katana/config.json\n",
};

/* The commands that ask a running katana over its REST API (cli_remote.c, cli_top.c): the
 * address and token come from the api section of FILE. */
#define REMOTE_CONFIG_OPTION                                                                      \
    "  -c, --config FILE  the running katana's configuration, for api.listen and api.token\n"     \
    "                     (default " AG_CLI_DEFAULT_CONFIG ")\n"

const ag_cli_cmd ag_cli_status = {
    .name = "status", .main = ag_cli_status_main,
    .summary = "show a running katana's nodes, panel pulls and pushes, and busiest users",
    .usage = "status [-c FILE]",
    .help =
    "Ask the running katana (its REST API, as FILE's api section says) for its nodes, each\n"
    "node's last panel pull and push with their errors, its users, sessions and flows, and\n"
    "the users with live sessions or traffic, busiest first. Exits 1 when the API does not\n"
    "answer or refuses the token.\n\n"
    "Options:\n" REMOTE_CONFIG_OPTION "\n"
    "Example:\n"
    "  katana status\n",
};

const ag_cli_cmd ag_cli_top = {
    .name = "top", .main = ag_cli_top_main,
    .summary = "a live view of a running katana's busiest users and flows",
    .usage = "top [-c FILE] [-n N] [--once]",
    .help =
    "Follow the running katana's traffic stream and redraw, every second, the busiest users\n"
    "and flows with their rates; q quits.\n\n"
    "Options:\n" REMOTE_CONFIG_OPTION
    "  -n N               rows per table (default 10)\n"
    "  --once             print one screen, after one traffic sample, and exit\n\n"
    "Example:\n"
    "  katana top --once\n",
};

const ag_cli_cmd ag_cli_kill = {
    .name = "kill", .main = ag_cli_kill_main,
    .summary = "end live flows of a running katana, by id or selector",
    .usage = "kill [-c FILE] FLOW_ID...\n"
             "kill [-c FILE] [--user UID] [--session ID] [--node TAG] [--inbound TAG] "
             "[--outbound TAG] | --all",
    .help =
    "End live flows through the REST API: the flows given by id (see katana status or\n"
    "GET /v1/connections), every flow matching all the selectors given, or --all flows.\n"
    "Prints how many were ended.\n\n"
    "Options:\n" REMOTE_CONFIG_OPTION
    "  --user UID, --session ID, --node TAG, --inbound TAG, --outbound TAG\n"
    "                     select the flows (all of them must match)\n"
    "  --all              every live flow\n\n"
    "Example:\n"
    "  katana kill --user 12\n",
};

/* ------------------------------------------------------------------------------------------ */
/* version, help                                                                                */
/* ------------------------------------------------------------------------------------------ */

static int version_main(int argc, char **argv)
{
    if (argc > 1)
        return ag_cli_usage_error("version", "unexpected argument '%s'", argv[1]);
    printf("katana %s\n", PACKAGE_VERSION);
    return 0;
}

static int help_main(int argc, char **argv)
{
    if (argc > 2)
        return ag_cli_usage_error("help", "unexpected argument '%s'", argv[2]);
    if (argc < 2) {
        print_overview(stdout);
        return 0;
    }
    const ag_cli_cmd *c = find_command(argv[1]);
    if (c == NULL) {
        const char *near = closest_command(argv[1]);
        return ag_cli_usage_error("help", "unknown command '%s'%s%s%s", argv[1],
                                  near != NULL ? " (did you mean '" : "", near != NULL ? near : "",
                                  near != NULL ? "'?)" : "");
    }
    print_help(stdout, c);
    return 0;
}

const ag_cli_cmd ag_cli_version = {
    .name = "version", .main = version_main,
    .summary = "print the version",
    .usage = "version",
    .help = "Print the program's name and version (\"katana " PACKAGE_VERSION "\"); also\n"
            "'katana --version'.\n",
};

const ag_cli_cmd ag_cli_help = {
    .name = "help", .main = help_main,
    .summary = "list the commands, or print one command's help",
    .usage = "help [COMMAND]",
    .help = "Without COMMAND, list the commands with a summary of each (also 'katana --help').\n"
            "With COMMAND, print its usage, options and an example (also\n"
            "'katana COMMAND --help').\n",
};

/* ------------------------------------------------------------------------------------------ */
/* the command line                                                                             */
/* ------------------------------------------------------------------------------------------ */

int ag_cli_main(int argc, char **argv)
{
    if (argc < 2) {
        fputs("katana: no command given\n\n", stderr);
        print_overview(stderr);
        return AG_CLI_USAGE;
    }
    const char *word = argv[1];
    if (strcmp(word, "-h") == 0 || strcmp(word, "--help") == 0)
        word = "help";
    else if (strcmp(word, "--version") == 0)
        word = "version";
    else if (word[0] == '-')
        return ag_cli_usage_error(NULL, "unknown option '%.*s'", (int)strcspn(word, "="), word);
    const ag_cli_cmd *c = find_command(word);
    if (c == NULL) {
        const char *near = closest_command(word);
        return ag_cli_usage_error(NULL, "unknown command '%s'%s%s%s", word,
                                  near != NULL ? " (did you mean '" : "", near != NULL ? near : "",
                                  near != NULL ? "'?)" : "");
    }
    if (wants_help(argc - 1, argv + 1)) { /* `katana help --help` too: help's own help */
        print_help(stdout, c);
        return 0;
    }
    return c->main(argc - 1, argv + 1);
}
