/*
 * katana's command line (katana(8) COMMANDS, docs/operations.md): the command table, help,
 * and the usage errors every command reports the same way.
 *
 * A command is one ag_cli_cmd: its name, a one-line summary for `katana help`, its usage
 * synopsis (after "katana ") and its help text, and the function that runs it. Adding a
 * command: define its ag_cli_cmd (in the command's own file or in cli.c), declare it below,
 * and add one line to the table in cli.c.
 *
 * Exit codes of every command: 0 success, 1 the work failed (an invalid configuration, a
 * runtime error), 2 a usage error (on stderr: `katana CMD: WHAT`, then `usage: katana ...`).
 */
#ifndef AG_CLI_H
#define AG_CLI_H

#include <stdbool.h>

/** A usage error's exit code (katana(8) EXIT STATUS). */
#define AG_CLI_USAGE 2

/** One command of the table. Every member is a static string or function. */
typedef struct ag_cli_cmd {
    const char *name;    /**< the command word: "check" */
    const char *summary; /**< one line for the command list, no final period */
    const char *usage;   /**< the synopsis after "katana ": "check [--offline] -c FILE";
                              several forms are separated by "\n" */
    const char *help;    /**< what it does, its options and an example; ends with "\n" */
    /** Run the command: @p argv[0] is the command word, the rest its arguments (the global
     *  getopt state is the command's). @return the exit code. Never called for `-h`/`--help`
     *  among the arguments: the table prints the help instead. */
    int (*main)(int argc, char **argv);
} ag_cli_cmd;

/* the commands (one line each; the table in cli.c lists them in `katana help` order) */
extern const ag_cli_cmd ag_cli_run, ag_cli_check, ag_cli_import, ag_cli_status, ag_cli_top,
    ag_cli_kill, ag_cli_keygen, ag_cli_version, ag_cli_help;

/**
 * The whole command line: pick the command named by @p argv[1] and run it, or print the help
 * asked for. `katana`, `katana help`, `katana --help` and `-h` list the commands (the first on
 * stderr with exit 2, the others on stdout with 0); `katana help CMD` and `katana CMD --help`
 * print that command's help (0), `katana help --help` the help of help. An unknown command
 * is a usage error suggesting the nearest one (sv_closest()). @return the process exit code.
 */
int ag_cli_main(int argc, char **argv);

/**
 * Report a usage error of command @p cmd (NULL: the command line as a whole) on stderr:
 * "katana CMD: " + the printf-style message + "\n", then the command's usage line(s).
 * @return AG_CLI_USAGE, for `return ag_cli_usage_error(...)`.
 */
int ag_cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

struct option;

/**
 * Report the option getopt_long() just refused with '?' or ':' (opterr 0, an optstring
 * starting with ':') as a usage error of @p cmd: "unknown option '--foo'" (a long option's
 * "=value" left out), "unknown option '-x'", "option '-c' needs a value", "option
 * '--offline' takes no value".
 * @param ch     what getopt_long() returned ('?' or ':')
 * @param argv   the vector given to getopt_long() (its optind and optopt are read)
 * @param longs  the long options given to getopt_long(), or NULL
 * @return AG_CLI_USAGE.
 */
int ag_cli_bad_option(const char *cmd, int ch, char **argv, const struct option *longs);

/** The `-c FILE` commands (agent/main.c): serve @p path / validate it (katana(8)).
 *  @return the exit code (0, or 1 with the reason on stderr). */
int ag_cmd_run(const char *path);
int ag_cmd_check(const char *path, bool offline);

/** `katana keygen KIND ...` (agent/keygen.c); @p argv[0] is "keygen". @return the exit code. */
int ag_keygen_main(int argc, char **argv);

#endif
