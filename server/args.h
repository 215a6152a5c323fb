/* SPDX-License-Identifier: Apache-2.0 */
/* args.h - the command line and --config (args.c), parsed into the options
 * the rooms consume (struct srv_opts, exports.h), and the wiring of the
 * rooms into one server (serve.c).
 */
#ifndef ARGS_H
#define ARGS_H

#include "exports.h"

enum srv_args_result { SRV_ARGS_RUN, SRV_ARGS_EXIT, SRV_ARGS_ERROR };
/* Parses ARGV (and the --config file it names; flags override the file).
 * SRV_ARGS_EXIT: --help or --version was printed.  SRV_ARGS_ERROR: ERR holds
 * one line naming the problem.  O is filled (srv_opts_free) in every case. */
enum srv_args_result srv_args_parse(int argc, char **argv, struct srv_opts *o, char *err,
				    size_t errlen);
/* Reads the INI file PATH into O; 0, or -1 with "FILE:LINE: problem" in ERR. */
int srv_config_load(const char *path, struct srv_opts *o, char *err, size_t errlen);
void srv_opts_free(struct srv_opts *o);

#endif
