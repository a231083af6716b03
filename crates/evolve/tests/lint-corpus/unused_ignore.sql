-- evolve:ignore ban-drop-table
SELECT 1;
