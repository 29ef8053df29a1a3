/* profile.c: `smallkv profile show PROFILE`: print a SmallKV profile (smallkv_print_profile):
 * the models it was made for, the calibration behind it, the mapping metric and depth. */
#include "cli.h"
#include "include/smallkv.h"
#include <stdio.h>
#include <string.h>

static const char *PROFILE_USAGE =
    "usage: smallkv profile show PROFILE\n"
    "Print a SmallKV profile (profiles/*.skvprof, format in profiles/FORMAT.md): the LLM and\n"
    "SLM fingerprints it was made for, the calibration corpora and settings, the mapping\n"
    "metric, the SLM early-stop depth and the retained-similarity curve.\n"
    "Exit status: 0 ok, 1 the file does not load, 2 bad usage.\n";

int cmd_profile(int argc, char **argv) {
    if (argc < 2) return cli_usage_error(PROFILE_USAGE, "profile: missing subcommand (show)");
    if (cli_is_help(argv[1])) { fputs(PROFILE_USAGE, stdout); return CLI_OK; }
    if (strcmp(argv[1], "show")) return cli_usage_error(PROFILE_USAGE, "profile: unknown subcommand '%s'", argv[1]);
    const char *path = NULL;
    for (int i = 2; i < argc; i++) {
        if (cli_is_help(argv[i])) { fputs(PROFILE_USAGE, stdout); return CLI_OK; }
        if (argv[i][0] == '-' && argv[i][1]) return cli_usage_error(PROFILE_USAGE, "profile: unknown option '%s'", argv[i]);
        if (path) return cli_usage_error(PROFILE_USAGE, "profile: unexpected argument '%s'", argv[i]);
        path = argv[i];
    }
    if (!path) return cli_usage_error(PROFILE_USAGE, "profile show: missing PROFILE");
    if (smallkv_print_profile(path, stdout)) return cli_fail(NULL);
    return CLI_OK;
}
