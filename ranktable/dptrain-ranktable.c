/* dptrain-ranktable.c — dptrain-ranktable: show, validate and convert rank tables, or build one
 * from a job step's environment. Owns argument parsing, exit codes and human-readable output;
 * everything about tables is the library's (ranktable.h). Exit 0 ok, 1 bad table or failure, 2
 * usage. */
#include "common/error.h"
#include "common/readfile.h"
#include "ranktable/ranktable.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROG "dptrain-ranktable"

#define EXIT_USAGE 2

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: " PROG " COMMAND [OPTIONS] [FILE]\n"
	    "\n"
	    "Show, check and convert dptrain/HCCL rank tables (FILE '-' reads standard input).\n"
	    "\n"
	    "Commands:\n"
	    "  show FILE                     print the table: one line per rank, then the master\n"
	    "                                endpoint, world size, nodes and the schema read\n"
	    "  validate FILE...              check tables; print 'FILE: ok: ...' for each\n"
	    "  convert --to SCHEMA FILE [-o OUT]\n"
	    "                                rewrite a table in another schema\n"
	    "  from-env [--to SCHEMA] [--source auto|slurm|torchrun] [-o OUT]\n"
	    "                                build a table from Slurm (SLURM_*) or torchrun-style\n"
	    "                                (WORLD_SIZE, MASTER_ADDR, ...) variables\n"
	    "\n"
	    "Options:\n"
	    "  -t, --to SCHEMA      dptrain (HCCL v1.0 + the dptrain object), hccl (hccl_tools.py\n"
	    "                       v1.0) or legacy (MindSpore's group_list form)\n"
	    "  -o, --output OUT     write OUT atomically instead of standard output\n"
	    "  -s, --source SOURCE  from-env: which variables to read (default auto)\n"
	    "  -h, --help           this help\n"
	    "  -V, --version        the version\n"
	    "\n"
	    "Exit status: 0 ok, 1 invalid table or failure, 2 usage error. See " PROG "(1).\n");
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, PROG ": ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "; try '" PROG " --help'\n");
	return EXIT_USAGE;
}

/* Read FILE ("-": standard input); prints the error and returns -1 on failure. */
static int load(const char *file, struct ranktable *rt)
{
	struct dp_error err;
	int rv;

	if (strcmp(file, "-") == 0) {
		size_t len;
		char *text;
		/* bounded like rt_read */
		rv = dp_read_fd(STDIN_FILENO, "<stdin>", RT_FILE_MAX, &text, &len, &err);
		if (rv == 0)
			rv = rt_parse(rt, text, len, "<stdin>", &err);
		else if (errno == EFBIG)
			errprintf(&err, "%s: not a rank table", err.text);
		free(text);
	} else {
		rv = rt_read(rt, file, &err);
	}
	if (rv < 0)
		fprintf(stderr, PROG ": %s\n", err.text);
	return rv;
}

/* The table in `schema` on standard output, or atomically into out. 0, or 1 after a message. */
static int emit(const struct ranktable *rt, enum rt_schema schema, const char *out)
{
	struct dp_error err;

	if (out) {
		if (rt_write_atomic(rt, out, schema, 0644, &err) < 0) {
			fprintf(stderr, PROG ": %s\n", err.text);
			return 1;
		}
		return 0;
	}
	char *text = rt_to_json(rt, schema, &err);
	if (!text) {
		fprintf(stderr, PROG ": cannot write the %s schema: %s\n", rt_schema_name(schema),
			err.text);
		return 1;
	}
	int bad = fputs(text, stdout) == EOF || fflush(stdout) == EOF;
	free(text);
	if (bad) {
		fprintf(stderr, PROG ": cannot write to standard output: %s\n", strerror(errno));
		return 1;
	}
	return 0;
}

static int width_of_int(int v)
{
	return snprintf(NULL, 0, "%d", v);
}

static int max_int(int a, int b)
{
	return a > b ? a : b;
}

static void print_table(const struct ranktable *rt)
{
	int wr = 4, wn = 4, wh = 4, wl = 10, wd = 6, wg = 3;

	for (int r = 0; r < rt->world_size; r++) {
		const struct rt_rank *x = &rt->ranks[r];
		wr = max_int(wr, width_of_int(r));
		wn = max_int(wn, width_of_int(x->node_rank));
		wh = max_int(wh, (int)strlen(x->host));
		wl = max_int(wl, width_of_int(x->local_rank));
		wd = max_int(wd, width_of_int(x->device_id));
		wg = max_int(wg, width_of_int(x->gpu));
	}
	printf("%*s  %*s  %-*s  %*s  %*s  %*s  %s\n", wr, "rank", wn, "node", wh, "host", wl,
	       "local rank", wd, "device", wg, "gpu", "address");
	for (int r = 0; r < rt->world_size; r++) {
		const struct rt_rank *x = &rt->ranks[r];
		char gpu[16];
		if (x->gpu < 0)
			snprintf(gpu, sizeof(gpu), "-");
		else
			snprintf(gpu, sizeof(gpu), "%d", x->gpu);
		printf("%*d  %*d  %-*s  %*d  %*d  %*s  %s\n", wr, r, wn, x->node_rank, wh, x->host,
		       wl, x->local_rank, wd, x->device_id, wg, gpu, x->addr);
	}
	printf("\n");
	if (!rt->master_addr[0])
		printf("master:     unknown (the %s schema does not carry it)\n",
		       rt_schema_name(rt->schema));
	else if (rt->master_port <= 0)
		printf("master:     %s (port unknown)\n", rt->master_addr);
	else if (strchr(rt->master_addr, ':')) /* IPv6: brackets, as in a URL */
		printf("master:     [%s]:%d\n", rt->master_addr, rt->master_port);
	else
		printf("master:     %s:%d\n", rt->master_addr, rt->master_port);
	printf("world size: %d\n", rt->world_size);
	printf("nodes:      %d\n", rt->node_count);
	if (rt->job_id[0])
		printf("job:        %s\n", rt->job_id);
	if (rt->step_id[0])
		printf("step:       %s\n", rt->step_id);
	printf("schema:     %s\n", rt_schema_name(rt->schema));
}

/* Options shared by the commands; each command says which it takes. */
struct cli_opts {
	const char *to, *output, *source;
	int nfiles;
	char **files;
};

/* Parse cmd's options; `allowed` holds the short letters of those it takes ("t" --to, "o"
 * --output, "s" --source). Returns an exit status to end with (help, usage error), or -1 to go
 * on with o filled. */
static int parse_opts(const char *cmd, int argc, char **argv, const char *allowed,
		      struct cli_opts *o)
{
	static const struct option longopts[] = {
	    {"to", required_argument, NULL, 't'},
	    {"output", required_argument, NULL, 'o'},
	    {"source", required_argument, NULL, 's'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	int c;

	memset(o, 0, sizeof(*o));
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":t:o:s:h", longopts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return 0;
		}
		if (c == ':')
			return usage_error("%s: option '%s' needs a value", cmd, argv[optind - 1]);
		if (c == '?' && optopt)
			return usage_error("%s: unknown option '-%c'", cmd, optopt);
		if (c == '?')
			return usage_error("%s: unknown option '%s'", cmd, argv[optind - 1]);
		if (!strchr(allowed, c)) {
			const char *name = c == 't' ? "--to" : c == 'o' ? "--output" : "--source";
			return usage_error("%s does not take %s", cmd, name);
		}
		if (c == 't')
			o->to = optarg;
		else if (c == 'o')
			o->output = optarg;
		else if (c == 's')
			o->source = optarg;
	}
	o->files = argv + optind;
	o->nfiles = argc - optind;
	return -1; /* go on */
}

static int cmd_show(int argc, char **argv)
{
	struct cli_opts o;
	struct ranktable rt;
	int rv = parse_opts("show", argc, argv, "", &o);

	if (rv >= 0)
		return rv;
	if (o.nfiles != 1)
		return usage_error("show takes one FILE");
	if (load(o.files[0], &rt) < 0)
		return 1;
	print_table(&rt);
	rv = fflush(stdout) == EOF ? 1 : 0;
	rt_free(&rt);
	return rv;
}

static int cmd_validate(int argc, char **argv)
{
	struct cli_opts o;
	int rv = parse_opts("validate", argc, argv, "", &o);

	if (rv >= 0)
		return rv;
	if (o.nfiles < 1)
		return usage_error("validate takes at least one FILE");
	rv = 0;
	for (int i = 0; i < o.nfiles; i++) {
		struct ranktable rt;
		if (load(o.files[i], &rt) < 0) {
			rv = 1;
			continue;
		}
		printf("%s: ok: %d rank%s on %d node%s (%s)\n", o.files[i], rt.world_size,
		       rt.world_size == 1 ? "" : "s", rt.node_count, rt.node_count == 1 ? "" : "s",
		       rt_schema_name(rt.schema));
		rt_free(&rt);
	}
	return rv;
}

static int schema_arg(const char *cmd, const char *to, enum rt_schema *schema)
{
	if (rt_schema_from_name(to, schema) < 0)
		return usage_error("%s: unknown schema '%s' (dptrain, hccl or legacy)", cmd, to);
	return -1;
}

static int cmd_convert(int argc, char **argv)
{
	struct cli_opts o;
	struct ranktable rt;
	enum rt_schema schema;
	int rv = parse_opts("convert", argc, argv, "ot", &o); /* --output, --to */

	if (rv >= 0)
		return rv;
	if (!o.to)
		return usage_error("convert needs --to dptrain|hccl|legacy");
	if ((rv = schema_arg("convert", o.to, &schema)) >= 0)
		return rv;
	if (o.nfiles != 1)
		return usage_error("convert takes one FILE");
	if (load(o.files[0], &rt) < 0)
		return 1;
	rv = emit(&rt, schema, o.output);
	rt_free(&rt);
	return rv;
}

static int cmd_from_env(int argc, char **argv)
{
	struct cli_opts o;
	struct ranktable rt;
	enum rt_schema schema = RT_SCHEMA_DPTRAIN;
	enum rt_env_source source = RT_ENV_AUTO;
	char used[RT_USED_MAX];
	struct dp_error err;
	int rv = parse_opts("from-env", argc, argv, "ost", &o); /* --output, --source, --to */

	if (rv >= 0)
		return rv;
	if (o.to && (rv = schema_arg("from-env", o.to, &schema)) >= 0)
		return rv;
	if (o.source && strcmp(o.source, "slurm") == 0)
		source = RT_ENV_SLURM;
	else if (o.source && strcmp(o.source, "torchrun") == 0)
		source = RT_ENV_TORCHRUN;
	else if (o.source && strcmp(o.source, "auto") != 0)
		return usage_error("from-env: unknown source '%s' (auto, slurm or torchrun)",
				   o.source);
	if (o.nfiles != 0)
		return usage_error("from-env takes no FILE (use -o OUT)");
	if (rt_from_env(&rt, source, used, &err) < 0) {
		fprintf(stderr, PROG ": from-env: %s\n", err.text);
		return 1;
	}
	fprintf(stderr, PROG ": from-env: using %s\n", used);
	rv = emit(&rt, schema, o.output);
	rt_free(&rt);
	return rv;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*run)(int, char **);
	} cmds[] = {
	    {"show", cmd_show},
	    {"validate", cmd_validate},
	    {"convert", cmd_convert},
	    {"from-env", cmd_from_env},
	};

	if (argc < 2)
		return usage_error("no command given");
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
		printf(PROG " %s\n", DPTRAIN_VERSION);
		return 0;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (strcmp(argv[1], cmds[i].name) == 0)
			return cmds[i].run(argc - 1, argv + 1);
	if (argv[1][0] == '-')
		return usage_error("unknown option '%s'", argv[1]);
	return usage_error("unknown command '%s'", argv[1]);
}
