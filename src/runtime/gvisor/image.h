/* The gvisor checkpoint image in the form the store dedups well (image.c). */
#pragma once

#define GV_IMAGE_FILE "checkpoint.img"   /* what runsc writes and reads */
#define GV_IMAGE_HEAD "state.head"       /* its head, verbatim */
#define GV_IMAGE_RAW "state.raw"         /* its chunks, decompressed */

/* dir/checkpoint.img -> dir/state.head + dir/state.raw (the image is removed). -EBADMSG
 * for a file that is not a state file of the layout image.c describes. */
int gv_image_split(const char *dir);
/* The reverse, with the chunks as deflate stored blocks; a dir that already holds
 * checkpoint.img is left as it is. The parts are removed. */
int gv_image_join(const char *dir);
