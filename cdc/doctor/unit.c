/* The systemd unit that runs this configuration file, and the directories systemd makes for it when it
 * starts. On a fresh package install /run/cdc and /var/lib/cdc are not there yet. They are the unit's
 * RuntimeDirectory= and StateDirectory=, and doctor says so instead of failing. */
#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/doctor/doctor_internal.h"

/* Where systemd reads units, in its order. The first directory with the unit's file wins. */
static const char *const UNIT_DIRS[] = {"/etc/systemd/system", "/run/systemd/system", "/lib/systemd/system",
					"/usr/lib/systemd/system"};
#define NUNIT_DIRS (sizeof(UNIT_DIRS) / sizeof(UNIT_DIRS[0]))

/* What the unit files say, as far as doctor needs it. */
typedef struct unit_text {
	char config[PATH_MAX]; /* the -c FILE of ExecStart=, %i not yet replaced */
	cfg_strlist runtime, state;
} unit_text;

/* A directive's values into l, space-separated. An empty value resets the list, as in systemd. */
static void values(cfg_strlist *l, char *v)
{
	if (!*v)
		cfg_strlist_free(l);
	for (char *tok = strtok(v, " \t"); tok; tok = strtok(NULL, " \t"))
		cfg_strlist_push(l, tok);
}

/* ExecStart='s -c FILE (or --config FILE, --config=FILE), with its prefixes (-@+!:) skipped. */
static void exec_config(unit_text *u, char *v)
{
	char *prev = NULL;
	for (char *tok = strtok(v, " \t"); tok; prev = tok, tok = strtok(NULL, " \t")) {
		if (prev && (strcmp(prev, "-c") == 0 || strcmp(prev, "--config") == 0))
			snprintf(u->config, sizeof(u->config), "%s", tok);
		else if (strncmp(tok, "--config=", 9) == 0)
			snprintf(u->config, sizeof(u->config), "%s", tok + 9);
	}
}

static void read_unit_file(unit_text *u, const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	char line[4096];
	bool service = false;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\r\n")] = '\0';
		char *p = line;
		while (isspace((unsigned char)*p))
			p++;
		if (*p == '[') {
			service = strncmp(p, "[Service]", 9) == 0;
			continue;
		}
		char *eq = strchr(p, '=');
		if (!service || !eq || *p == '#' || *p == ';')
			continue;
		*eq = '\0';
		char *key = p, *v = eq + 1;
		for (char *end = eq; end > key && isspace((unsigned char)end[-1]);)
			*--end = '\0';
		while (isspace((unsigned char)*v))
			v++;
		if (strcmp(key, "ExecStart") == 0 && *v)
			exec_config(u, v);
		else if (strcmp(key, "RuntimeDirectory") == 0)
			values(&u->runtime, v);
		else if (strcmp(key, "StateDirectory") == 0)
			values(&u->state, v);
	}
	fclose(f);
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* name's drop-ins (the .conf files of name.d in every unit directory), by file name. */
static void read_dropins(unit_text *u, const char *name)
{
	cfg_strlist dropins = {0};
	char path[PATH_MAX];
	for (size_t i = 0; i < NUNIT_DIRS; i++) {
		snprintf(path, sizeof(path), "%s/%s.d", UNIT_DIRS[i], name);
		DIR *dir = opendir(path);
		for (struct dirent *e; dir && (e = readdir(dir));) {
			size_t n = strlen(e->d_name);
			if (n > 5 && strcmp(e->d_name + n - 5, ".conf") == 0) {
				char file[PATH_MAX + 256];
				snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
				cfg_strlist_push(&dropins, file);
			}
		}
		if (dir)
			closedir(dir);
	}
	qsort(dropins.v, dropins.n, sizeof(char *), by_name);
	for (size_t i = 0; i < dropins.n; i++)
		read_unit_file(u, dropins.v[i]);
	cfg_strlist_free(&dropins);
}

/* The unit's file (the first directory that has it), then its drop-ins. False if there is no such unit. */
static bool read_unit(unit_text *u, const char *name)
{
	char path[PATH_MAX];
	for (size_t i = 0; i < NUNIT_DIRS; i++) {
		snprintf(path, sizeof(path), "%s/%s", UNIT_DIRS[i], name);
		FILE *f = fopen(path, "r");
		if (f) {
			fclose(f);
			read_unit_file(u, path);
			read_dropins(u, name);
			return true;
		}
	}
	return false;
}

static void unit_text_free(unit_text *u)
{
	cfg_strlist_free(&u->runtime);
	cfg_strlist_free(&u->state);
}

/* s with %i replaced by instance. */
static void instantiate(buf *out, const char *s, const char *instance)
{
	for (const char *p = s; *p; p++) {
		if (p[0] == '%' && p[1] == 'i' && instance) {
			buf_puts(out, instance);
			p++;
		} else
			buf_putc(out, *p);
	}
}

/* The instance for which the template's -c FILE (with %i) is config (absolute), or NULL. */
static char *instance_of(const char *template_config, const char *config)
{
	const char *at = strstr(template_config, "%i");
	if (!at)
		return NULL;
	size_t pre = (size_t)(at - template_config), post = strlen(at + 2), n = strlen(config);
	if (n <= pre + post || strncmp(config, template_config, pre) != 0 ||
	    strcmp(config + n - post, at + 2) != 0)
		return NULL;
	char *instance = util_xstrdup(config + pre);
	instance[n - pre - post] = '\0';
	if (strchr(instance, '/')) {
		free(instance);
		return NULL;
	}
	return instance;
}

/* Whether u, instantiated, runs config (both resolved), noting its directories in d->unit. */
static bool runs(doctor *d, const unit_text *u, const char *name, const char *instance, const char *config)
{
	buf want = {0};
	instantiate(&want, u->config, instance);
	char real[PATH_MAX];
	bool same = want.data && realpath(want.data, real) && strcmp(real, config) == 0;
	buf_free(&want);
	if (!same)
		return false;
	snprintf(d->unit.name, sizeof(d->unit.name), "%s", name);
	const struct {
		const cfg_strlist *l;
		const char *root, *key;
	} kinds[] = {{&u->runtime, "/run/", "RuntimeDirectory"}, {&u->state, "/var/lib/", "StateDirectory"}};
	for (size_t k = 0; k < 2; k++)
		for (size_t i = 0; i < kinds[k].l->n; i++) {
			buf dir = {0}, why = {0};
			buf_puts(&dir, kinds[k].root);
			instantiate(&dir, kinds[k].l->v[i], instance);
			buf_printf(&why, "%s=%s", kinds[k].key, kinds[k].l->v[i]);
			cfg_strlist_push(&d->unit.dirs, dir.data);
			cfg_strlist_push(&d->unit.dirs, why.data);
			buf_free(&dir);
			buf_free(&why);
		}
	return true;
}

/* cdc.service, or the instance of cdc@.service, whose ExecStart= runs this configuration file. */
static void find_unit(doctor *d)
{
	d->unit.looked = true;
	char config[PATH_MAX];
	if (!realpath(d->c->path, config))
		return;
	unit_text u = {0};
	bool found = read_unit(&u, "cdc.service") && runs(d, &u, "cdc.service", NULL, config);
	unit_text_free(&u);
	u = (unit_text){0};
	char *instance = NULL;
	if (!found && read_unit(&u, "cdc@.service") && (instance = instance_of(u.config, config))) {
		char name[128];
		snprintf(name, sizeof(name), "cdc@%s.service", instance);
		read_dropins(&u, name); /* an instance's own come after the template's */
		runs(d, &u, name, instance, config);
	}
	free(instance);
	unit_text_free(&u);
}

const char *doctor_unit_makes(doctor *d, const char *dir)
{
	if (!d->unit.looked)
		find_unit(d);
	for (size_t i = 0; i + 1 < d->unit.dirs.n; i += 2)
		if (strcmp(d->unit.dirs.v[i], dir) == 0)
			return d->unit.dirs.v[i + 1];
	return NULL;
}
