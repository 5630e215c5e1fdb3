/* config.h — the dptrain job config (JSON): parsed into one validated struct with defaults.
 * Pure C + jansson: the SPANK plugin and dptrain-launch link this too, so a bad config is
 * refused on the srun command line. Must not depend on Slurm, PMIx or the rest of the trainer.
 *
 * API contract used by other modules (keep these names; the config owner fills the rest):
 *   int  cfg_load(struct cfg *c, const char *path, int noverrides, char *const overrides[],
 *                 char *err, size_t errlen);   0 ok, -1 error (err names file + JSON path)
 *   int  cfg_parse(struct cfg *c, const char *text, size_t len, const char *name,
 *                  int noverrides, char *const overrides[], char *err, size_t errlen);
 *   char *cfg_to_json(const struct cfg *c);    resolved config, malloc'd, pretty JSON
 *   void cfg_free(struct cfg *c);
 * Fields other modules read: c->output.dir, c->output.per_rank_logs, c->output.console,
 * c->timeouts.rendezvous_s, c->device.kind, c->device.allow_shared_gpu, c->path (absolute). */
