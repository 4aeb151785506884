/* NOT BUILT YET (#16, in progress): every handler answers 501 until its part lands. */
#include "daemon/e2b/e2b.h"
#include "daemon/server.h"

void e2b_sandbox_create(struct conn *c) { conn_reply_error(c, 501, "e2b_sandbox_create is not built yet"); }
void e2b_sandbox_connect(struct conn *c) { conn_reply_error(c, 501, "e2b_sandbox_connect is not built yet"); }
void e2b_sandbox_list(struct conn *c) { conn_reply_error(c, 501, "e2b_sandbox_list is not built yet"); }
void e2b_sandbox_get(struct conn *c) { conn_reply_error(c, 501, "e2b_sandbox_get is not built yet"); }
void e2b_sandbox_kill(struct conn *c) { conn_reply_error(c, 501, "e2b_sandbox_kill is not built yet"); }
void e2b_sandbox_timeout(struct conn *c) { conn_reply_error(c, 501, "e2b_sandbox_timeout is not built yet"); }
void e2b_sandbox_pause(struct conn *c) { conn_reply_error(c, 501, "e2b_sandbox_pause is not built yet"); }
void e2b_sandbox_resume(struct conn *c) { conn_reply_error(c, 501, "e2b_sandbox_resume is not built yet"); }
void e2b_sandbox_metrics(struct conn *c) { conn_reply_error(c, 501, "e2b_sandbox_metrics is not built yet"); }
void e2b_sandbox_snapshot(struct conn *c) { conn_reply_error(c, 501, "e2b_sandbox_snapshot is not built yet"); }
void e2b_sandbox_fork(struct conn *c) { conn_reply_error(c, 501, "e2b_sandbox_fork is not built yet"); }
void e2b_snapshot_list(struct conn *c) { conn_reply_error(c, 501, "e2b_snapshot_list is not built yet"); }
void e2b_snapshot_delete(struct conn *c) { conn_reply_error(c, 501, "e2b_snapshot_delete is not built yet"); }
