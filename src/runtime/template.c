/* Templates: see template.h (being written). */
