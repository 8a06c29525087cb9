from datekit.calendar import day_of_year, days_in_month, is_leap, quarter, weekday

__all__ = ["day_of_year", "days_in_month", "is_leap", "quarter", "weekday"]
